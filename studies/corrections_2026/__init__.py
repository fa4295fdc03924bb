"""The 2026 corrections on the drift map (docs/PREREGISTRATION-2026.md): P3O, CTPO, MinPRO, TRM, DISPO and
OAPL at the drift map's separating levels, paired by seed with its committed runs."""
