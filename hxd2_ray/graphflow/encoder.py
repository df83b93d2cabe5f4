"""The fine-tuned question encoder (``encoder: lora``): a transformers model with LoRA adapters on its attention
projections, mean-pooled, trained together with the policy and flow heads.

Meant for GPUs; node and relation features stay the cached frozen ones (re-encoding the graph every step is what
the review calls the method's scalability problem). Only the adapters are trained and stored with the policy;
the base model is read again from ``lora_model`` when the policy is loaded.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch  # noqa: TID253 - a torch module: imported only by code that trains or walks
from torch import nn  # noqa: TID253

from hxd2_ray.models import resolve_embedding_path

__all__ = ["LoraQuestionEncoder"]

# Attention projections by naming convention: BERT-like (MiniLM, bce) and decoder (q_proj/v_proj) models.
_TARGETS = (("query", "value"), ("q_proj", "v_proj"), ("q", "v"))


def _target_modules(model: nn.Module) -> list[str]:
    names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    for pair in _TARGETS:
        if set(pair) <= names:
            return list(pair)
    raise ValueError(f"no attention projections to adapt among the model's linear layers {sorted(names)[:12]}")


class LoraQuestionEncoder(nn.Module):  # type: ignore[misc]  # torch is not followed by mypy
    """``forward(texts) -> [n, hidden]`` mean-pooled token states of a LoRA-adapted transformers model.

    ``model``: a local folder or ``builtin:minilm``; or pass ``base`` and ``tokenizer`` objects directly.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        rank: int = 8,
        alpha: int = 16,
        max_length: int = 64,
        base: Any = None,
        tokenizer: Any = None,
    ):
        super().__init__()
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415 - peft loads transformers
        from transformers import AutoModel, AutoTokenizer

        if base is None or tokenizer is None:
            path = resolve_embedding_path(model or "builtin:minilm")
            base = AutoModel.from_pretrained(path) if base is None else base
            tokenizer = AutoTokenizer.from_pretrained(path) if tokenizer is None else tokenizer
        self.tokenizer = tokenizer
        self.max_length = max_length
        config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=_target_modules(base))
        self.model = get_peft_model(base, config)
        self.out_dim = int(base.config.hidden_size)

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        device = next(self.model.parameters()).device
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(device)
        states = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return nn.functional.normalize(pooled, dim=-1)

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The trained parameters only (the adapters)."""
        return {n: p.detach().cpu() for n, p in self.named_parameters() if p.requires_grad}

    def load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        missing = [n for n, p in self.named_parameters() if p.requires_grad and n not in state]
        if missing:
            raise ValueError(f"adapter state lacks {missing[:3]}")
        own = dict(self.named_parameters())
        with torch.no_grad():
            for n, v in state.items():
                own[n].copy_(v)
