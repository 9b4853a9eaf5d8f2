"""Runnable examples, each a script (its opening lines say how to run it). A package only so that
`python -m apps.train -o algorithm.module=examples.custom_algorithm` imports it from the checkout root."""
