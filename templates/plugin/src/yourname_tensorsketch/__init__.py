"""yourname-tensorsketch: a TensorSketch plugin (the `yourname` chat provider)."""
