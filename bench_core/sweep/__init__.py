"""Sweeps: a params/*.yaml file as a plan (plan), run through the notebook template with papermill
(execute), the calls the template notebook makes (notebook), and where the sweep's time went (timing)."""
