"""The ingest seam: an index job's input into documents, with every file that cannot be read quarantined with a reason.

Where things are: :mod:`filesystems` resolves a location (a local path or ``s3://``) to a pyarrow filesystem;
:mod:`listing` walks the input (each file and folder once, a quarantine row for what it cannot read); :mod:`sources`
turns one file's bytes into documents, a pure function that returns quarantine rows instead of raising. Converting
documents to Markdown: :mod:`formats` is the registry of converters by suffix, :mod:`conversion` what every converter
shares (the text with its located regions, :class:`Rejected`, the bounds), :mod:`containers` checks what a file's
bytes really are and opens zips within bounds; the converters are :mod:`pdf` (PDFium, one region per page),
:mod:`ocr` (Tesseract for scanned pages, as a subprocess), :mod:`office` (DOCX, PPTX), :mod:`sheets` (XLSX, CSV) and
:mod:`web` (HTML, EPUB). No Ray here: the index job's ingest stage maps :func:`sources.read_documents` over its rows.
"""
