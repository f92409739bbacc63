"""Talking to devices: LD19, RPLIDAR A1, the pod-encoder MCU, the power-up sequencer."""
