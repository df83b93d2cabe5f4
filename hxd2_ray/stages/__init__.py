"""Ray-free units of work that the Ray Data job maps over column batches (pyarrow Tables in and out).

Each stage is a plain callable class: its constructor runs once per actor, ``__call__`` takes and returns a
``pyarrow.Table``. Unit tests call them directly; ``jobs/index.py`` wires them into Ray Data.
"""
