"""A history of runs: result folders of many dates read as one trend per configuration and machine (read), the
steps in each trend with what changed there (steps), a new run judged against the last stable stretch (gate),
and how the terminal and the report show them (text, show). `bench history` prints it; the report's History
section draws it.

Reads rows, never runs anything; imports no torch (the report's kernel reads it).
"""
