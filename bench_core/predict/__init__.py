"""Predicting a GPU that was not measured from one that was: spec sheets (specs.py) and what GPUs reach
beside them (ceilings.py), the whole-step model (model.py) and the per-operation path for a row that kept its
ops' table (ops.py), the model's error on published pairs (published.py) and on our own GPU pairs (own.py), the
groups whose pairs give a prediction its interval (groups.py), predictions from our rows (measured.py), what a
GPU costs an hour (prices.py) and the error tables docs/prediction.md states (tables.py).
"""
