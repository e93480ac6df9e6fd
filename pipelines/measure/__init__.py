"""Measurement: eval on labelled sets, the bench, and the scale corpus they index."""
