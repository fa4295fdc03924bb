"""Name -> object registries (presets, tasks, rollout sources): a taken name is refused, an
unknown one is a ``ValueError`` listing the valid names."""
from __future__ import annotations


class Registry(dict):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str, obj):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        if name in self:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self[name] = obj
        return obj

    def lookup(self, name: str):
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.kind} {name!r}; valid {self.kind}s: {', '.join(sorted(self))}") from None
