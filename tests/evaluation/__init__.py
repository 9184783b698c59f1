"""The evaluation toolkit: replays, sweeps, presets, rescue, sessions, the shipped sample and the
closed-loop benchmark."""
