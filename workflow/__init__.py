"""rlsweep: declarative experiment sweeps for reasoning-RL research."""

__version__ = "0.1.0"
