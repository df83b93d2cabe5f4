"""The chunking seam: documents into size-bounded, Markdown-aware chunks, each a verbatim slice of its document's text.

Where things are: :mod:`splitter` holds the chunker (Markdown sections found by a line scan, their header lines kept
out of the text as ``header_path``; a converted file also cut where each of its regions starts, so no chunk spans two
pages; each section then cut to size by langchain's ``RecursiveCharacterTextSplitter``). It imports only
:mod:`hxd2_ray.config` and :mod:`hxd2_ray.types` of the library; no Ray here.
"""
