"""OCR of a scanned page through Tesseract (Debian's ``tesseract-ocr`` and ``tesseract-ocr-chi-sim``; installed by
scripts/install), run as a subprocess: its models ship with the Debian package, nothing is fetched at run time.

The page image goes in on stdin as PNG and the text comes back on stdout; the call is bounded by what is left of
the file's ``ingest.max_convert_s``. A missing binary fails the file with a reason that names the fix. The binary's
version is part of the index fingerprint when OCR is on (``hxd2_ray.config.sources.converter_versions``).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from typing import Any

from hxd2_ray.config import IngestConfig
from hxd2_ray.ingest.conversion import Rejected, clean_text

TESSERACT = "tesseract"


def ocr_image(image: Any, cfg: IngestConfig, where: str, deadline: float | None = None) -> str:
    """The text Tesseract reads in a PIL ``image`` (languages ``ingest.ocr_languages``)."""
    if shutil.which(TESSERACT) is None:
        raise Rejected("ocr_unavailable", f"{where}: tesseract is not installed (apt-get install tesseract-ocr)")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    timeout = cfg.max_convert_s if deadline is None else max(1.0, deadline - time.monotonic())
    # --psm 3: automatic page segmentation (columns, blocks), Tesseract's default for a full page.
    cmd = [TESSERACT, "stdin", "stdout", "-l", cfg.ocr_languages, "--psm", "3"]
    try:
        done = subprocess.run(cmd, input=buf.getvalue(), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise Rejected("timeout", f"{where}: OCR took over {timeout:.0f} s") from exc
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Rejected("ocr_failed", f"{where}: tesseract exited {done.returncode}: {err[-1] if err else ''}")
    return clean_text(done.stdout.decode("utf-8", "replace"))
