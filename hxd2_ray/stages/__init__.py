"""Ray-free units of work that the Ray Data job maps over column batches (pyarrow Tables in and out).

Each stage is a plain callable class: its constructor runs once per actor, ``__call__`` takes and returns a
``pyarrow.Table``. Unit tests call them directly; ``ray_runner`` maps them over Ray Data,
``local_runner`` calls them in one process (the index build's two runners).
"""
