"""Checkpoint storage (DESIGN §5): the `Store` a backend writes through (store.py), its folder
(folder.py) and bucket-backed (sync.py) implementations, the bucket's I/O (bucket.py) over one
client for S3, GCS and Azure (objstore.py), the manifest format (manifest.py) and the
termination message that reports the latest checkpoint (termination.py)."""
