"""Dead-wheel pod fits: geometry, slip law, odometry drift and the split filters' noise."""
