"""The trainer's bottom layer, imported by every other: its error, bounded file reading, and
the model settings every layer reads."""
