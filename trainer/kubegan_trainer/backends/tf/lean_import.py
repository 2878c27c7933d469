"""Import TensorFlow without the optional packages Keras loads and the trainer never uses."""

from __future__ import annotations

import sys

# Keras imports these as it loads whenever they are installed (its scikit-learn wrapper, pandas
# input adapters, an image-gallery plot): about 2 of the 6 CPU seconds of `import tensorflow`,
# paid again at every worker start and restart. Keras guards each with `except ImportError`.
KERAS_EXTRAS = ("sklearn", "pandas", "matplotlib")


def import_tensorflow() -> None:
    """Import TensorFlow with KERAS_EXTRAS hidden while it loads, and only then: the digits
    loader imports scikit-learn later, and a user's model may import any of them."""
    if "tensorflow" in sys.modules:
        return
    hidden = [name for name in KERAS_EXTRAS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import tensorflow  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
