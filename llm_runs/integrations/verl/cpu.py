"""A CPU platform for verl (``VERL_PLATFORM=cpu``): one gloo rank, verl's FSDP engines on the device
``cpu``. For tests and laptops; tested with verl 0.9.1."""
from __future__ import annotations

import os

CPU_PLATFORM = "cpu"
"""``VERL_PLATFORM=cpu`` selects :func:`cpu_platform` (never auto-detected)."""


def cpu_platform():
    """A verl platform for one CPU process (tests, laptops), registered as ``cpu``.

    verl 0.9.1 ships cuda / npu / rocm platforms only and registers its FSDP engines for
    those devices; on CPU the FSDP2 engine works with one gloo rank once a platform answers
    ``device_name == "cpu"``. This class is registered through verl's own
    ``PlatformRegistry`` and is chosen only with ``VERL_PLATFORM=cpu`` (its
    ``is_platform_available`` is False, so a CPU-only Ray driver of a GPU job keeps verl's
    auto-detection). With ``VERL_PLATFORM=cpu`` the plugin also registers verl's FSDP /
    FSDP2 engine classes for the device ``cpu`` (:func:`register_cpu_engines`). Tested with
    verl 0.9.1.
    """
    import contextlib
    import types

    import torch
    from verl.plugin.platform import PlatformRegistry
    from verl.plugin.platform.platform_base import PlatformBase

    existing = PlatformRegistry.get(CPU_PLATFORM)
    if existing is not None:
        return existing

    def _zero(*_a, **_k):
        return 0

    def _none(*_a, **_k):
        return None

    # what verl calls on get_torch_device(): memory statistics (0 on CPU) and no-ops
    cpu_module = types.SimpleNamespace(
        **{n: getattr(torch.cpu, n) for n in ("is_available", "synchronize", "current_device", "device_count",
                                              "Stream", "stream", "current_stream", "Event") if hasattr(torch.cpu, n)},
        max_memory_allocated=_zero, max_memory_reserved=_zero, memory_allocated=_zero, memory_reserved=_zero,
        reset_peak_memory_stats=_none, empty_cache=_none, manual_seed=torch.manual_seed,
        get_device_name=lambda *a: "CPU",
        manual_seed_all=torch.manual_seed, set_device=_none, mem_get_info=lambda *a: (0, 0),
        get_rng_state=torch.get_rng_state, set_rng_state=torch.set_rng_state, is_initialized=lambda: True)

    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = cpu_module

        def is_available(self):
            return True

        def is_platform_available(self, use_smi_check=False):
            return False  # only by VERL_PLATFORM=cpu

        def current_device(self):
            return "cpu"  # verl moves modules and tensors with .to(get_device_id()); an index would mean cuda

        def device_count(self):
            return 1

        def set_device(self, device_index):
            return None

        def synchronize(self, device_index=None):
            return None

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings):
            return None

        def empty_cache(self):
            return None

        def get_device_capability(self, device_index=0):
            return None, None

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self):
            return None

        def profiler_stop(self):
            return None

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    # PlatformBase declares these as abstract properties; plain class attributes satisfy them
    for name in ("device_name", "vendor_name", "device_module"):
        PlatformCPU.__abstractmethods__ = frozenset(PlatformCPU.__abstractmethods__ - {name})
    PlatformRegistry.register(platform=CPU_PLATFORM)(PlatformCPU)
    return PlatformCPU


def init_cpu_process_group() -> None:
    """The one-rank gloo process group verl's workers expect, for a CPU run outside Ray.

    verl's ``initialize_global_process_group_ray`` (called by ``TrainingWorker``) asks for the
    backend ``"cpu:gloo,<device>:<comm backend>"``, which on the ``cpu`` platform reads
    ``"cpu:gloo,cpu:gloo"`` and torch refuses as a duplicate; it skips the call when a group
    exists, so this creates it first (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT from the
    environment, defaults 0 / 1 / 127.0.0.1 / a free port). Tested with verl 0.9.1.
    """
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def register_cpu_engines() -> None:
    """verl's FSDP / FSDP2 engines (language model, value model) for the device ``cpu``
    (verl 0.9.1 registers them for cuda and npu only). Idempotent."""
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    for model_type, cls_name in (("language_model", "FSDPEngineWithLMHead"),
                                 ("value_model", "FSDPEngineWithValueHead")):
        cls = getattr(transformer_impl, cls_name, None)
        if cls is None:
            continue
        for backend in ("fsdp", "fsdp2"):
            if CPU_PLATFORM not in EngineRegistry._engines.get(model_type, {}).get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend, device=CPU_PLATFORM)(cls)
