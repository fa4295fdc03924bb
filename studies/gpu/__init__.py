"""The Qwen3-0.6B study on one GPU: its report section (:mod:`studies.gpu.section`)."""
