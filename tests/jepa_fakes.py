"""A word-level fake of the BERT tokenizer, so that JEPA training tests need no transformers import."""
from __future__ import annotations

import hashlib
import re


class FakeTokenizer:
    """``[CLS] w1 w2 ... [SEP]`` with each lower-cased word hashed to an id in [1000, vocab)."""

    cls_token_id, sep_token_id, pad_token_id = 101, 102, 0

    def __init__(self, vocab_size: int = 30522):
        self.vocab_size = vocab_size

    def _word(self, w: str) -> int:
        return 1000 + int(hashlib.sha256(w.encode()).hexdigest()[:8], 16) % (self.vocab_size - 1000)

    def __call__(self, texts, add_special_tokens=True, truncation=False):
        out = []
        for t in texts:
            ids = [self._word(w) for w in re.findall(r"[a-z0-9]+|[^\sa-z0-9]", t.lower())]
            out.append([self.cls_token_id] + ids + [self.sep_token_id] if add_special_tokens else ids)
        return {"input_ids": out}
