"""hxd2_ray: HuixiangDou2 GraphRAG on Ray. Importing the package loads no Ray, vLLM, torch, Kùzu or Faiss."""

__version__ = "0.1.0"
