"""The second-rounding replicate's grid as data (:data:`GRIDS`), docs/PREREGISTRATION-REPLICATE.md.
Run with ``python -m studies.run --grid replicate_avx2``."""
from __future__ import annotations

from grids import Arm, Grid, grid_out
from llm_runs.reference import HORIZONS, STUDY_BASE
from studies.common.settings import MECHANISM_ARMS, MECHANISM_ESTIMATORS

AVX2_KERNELS = (("ATEN_CPU_CAPABILITY", "avx2"), ("MKL_ENABLE_INSTRUCTIONS", "AVX2"), ("DNNL_MAX_CPU_ISA", "AVX2"))
"""The replicate's kernel path on an AVX-512 machine (its grid's ``kernel_env``): torch's dispatch, MKL's and oneDNN's
ISA limited to AVX2 (the setting the earlier investigation found to change the long warm start's outcome: pc 0.860
against 0.514). On this machine it changes the warm-start recipe's rounding
(:func:`llm_runs.warmstart.rounds_as_committed` is False under it)."""


def replicate_arms() -> tuple[Arm, ...]:
    """The cells the verdicts re-decided on the replicate rest on: the study's long horizon under its Adam
    (gmc, is, tic_mask, tic_trunc, topr, gspo at d = 64 and the delay-0 run: H1, H2, H4), the mechanism
    grid's SGD arm (gmc, is, tic_mask and its delay-0 run: M1) and its AdamW + clip arm (gmc, is, tic_mask,
    tic_trunc, topr and its delay-0 run: M2b)."""
    sgd, adamwclip = (next(a for a in MECHANISM_ARMS if a.label == name) for name in ("sgd", "adamwclip"))
    return (Arm("study", {}, ("gmc", "is", "tic_mask", "tic_trunc", "topr", "gspo")),
            Arm("sgd", {**sgd.overrides, "mechanism_diagnostics": True}, ("gmc", "is", "tic_mask")),
            Arm("adamwclip", {**adamwclip.overrides, "mechanism_diagnostics": True}, MECHANISM_ESTIMATORS))


GRIDS = {
    "replicate_avx2": Grid("replicate_avx2", grid_out("replicate_avx2"), STUDY_BASE, {"long": HORIZONS["long"]}, (),
                            delays=(64,), seeds=tuple(range(10)), floor=(), arms=replicate_arms(),
                            kernel_env=AVX2_KERNELS,
                            pairs=("primary", "mechanism"),
                            doc="the second-rounding replicate (docs/PREREGISTRATION-REPLICATE.md): the study's long "
                                "horizon cells (gmc, is, tic_mask, tic_trunc, topr, gspo at d = 64 and d = 0), the "
                                "mechanism grid's SGD gmc, is, tic_mask and AdamW + clip gmc, is, tic_mask, tic_trunc, "
                                "topr cells (and their d = 0 runs), from the committed warm start, every run on AVX2 "
                                "kernels, seeds 0-9 (170 runs)"),
}
