"""Talking to devices: LD19, RPLIDAR A1, the pod-encoder MCU, and the staggered power-up sequencer."""
