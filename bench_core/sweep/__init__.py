"""Sweeps: a params/*.yaml file as a plan (plan), run through the notebook template with papermill
(execute), and the calls the template notebook makes (notebook)."""
