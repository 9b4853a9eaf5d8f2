"""The machinery of LAP-SGD / LPP-SGD (algorithms/lapsgd.py): Hogwild worker processes sharing one
model per rank, and the main process's layer-wise averaging across ranks."""
