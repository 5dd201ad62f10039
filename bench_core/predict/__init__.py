"""Predicting a GPU that was not measured from one that was: spec sheets (specs.py), the model
(model.py), its error on published pairs (published.py), the groups whose pairs give a prediction its
band (groups.py), and predictions from our rows (measured.py). See docs/prediction.md.
"""
