"""The GPU study's figure (F14): drawn by the report (``python -m studies.report``), not by ``python -m
studies.figures``, which runs without a GPU's results."""

GPU_FIGURE = f"{__name__}.f14_gpu_pc_vs_delay"
