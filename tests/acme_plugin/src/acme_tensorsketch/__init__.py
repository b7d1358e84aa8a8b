"""A sample third-party TensorSketch plugin (used by the integration tests)."""
