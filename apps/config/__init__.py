"""The run configuration of apps.train, apps.ps and apps.serve: the typed fields and their defaults
(schema.py), a raw mapping checked into them (typed.py), the config keys of the research codes pycomm
replaces mapped to ours (research_code_keys.py), the checks no single field can make (checks.py), and
reading, layering, overriding and printing (loading.py). Modules import each other in that order only."""
