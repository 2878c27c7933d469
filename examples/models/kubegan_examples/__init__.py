"""Example custom models for `spec.model.name: custom` (`model.entrypoint`).

They ship in the trainer images so a custom job can be tried without building an image; your
own models belong in your own package, in an image built `FROM` the kubegan trainer image.
"""
