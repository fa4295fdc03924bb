import os

# verl picks its platform on first use: the CPU platform the plugin registers, chosen before
# any verl import (the plugin then also registers verl's FSDP engines for the device "cpu").
os.environ.setdefault("VERL_PLATFORM", "cpu")
