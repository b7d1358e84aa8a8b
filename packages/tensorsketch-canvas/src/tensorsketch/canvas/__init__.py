"""TensorSketch canvas: the code ⇄ canvas engine."""
