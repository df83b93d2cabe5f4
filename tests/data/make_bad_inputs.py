"""Write tests/data/bad_inputs/: one file per quarantine reason (the generated files are committed too).

Run ``python tests/data/make_bad_inputs.py`` after changing this script; the output is byte-for-byte deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path

BAD_INPUTS = Path(__file__).resolve().parent / "bad_inputs"

# file name -> (bytes, expected quarantine reasons in order, number of documents that still come out)
FILES: dict[str, tuple[bytes, tuple[str, ...], int]] = {
    "binary_blob.txt": (bytes(range(256)) * 4, ("binary",), 0),
    "latin1.txt": ("Café au lait, naïve résumé.\n".encode("latin-1"), ("undecodable",), 0),
    "empty.txt": (b"", ("empty",), 0),
    "blank.md": (b"  \n\t\n   \r\n", ("whitespace_only",), 0),
    "partly_bad.jsonl": (
        (
            json.dumps({"id": "good-1", "title": "Good", "text": "This line is a valid record and survives."})
            + "\n"
            + '{"id": "bad-2", "text": "unterminated\n'
        ).encode(),
        ("malformed_json",),
        1,
    ),
    "no_text.json": (json.dumps({"id": "x1", "title": "No text", "body": "the text is under the wrong key"}).encode(),
                     ("missing_text_field",), 0),
    "junk.pdf": (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\njunk that is not a real pdf\n", ("unsupported_type",), 0),
}


def main() -> None:
    BAD_INPUTS.mkdir(exist_ok=True)
    for name, (data, _, _) in FILES.items():
        (BAD_INPUTS / name).write_bytes(data)


if __name__ == "__main__":
    main()
