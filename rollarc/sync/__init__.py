"""Weight transfer from the trainer to rollout workers: versioned full copies and lossless sparse bf16 deltas.

The package is split one concept per module, and this file imports none of them, so that loading a
config (``rollarc.sync.config``) does not pay for torch:

- ``config``    ``SyncConfig``: the ``sync:`` section of the training config.
- ``checksum``  fast per-range checksums (xxh3) over raw tensor bytes.
- ``varint``    vectorised LEB128 packing of the gaps between changed positions.
- ``codec``     ``encode_delta`` / ``encode_full`` / ``apply_delta`` over buckets of ``TensorPatch``.
- ``shard``     ``ShardSpec``: the tensor-parallel slices a receiver holds, and their extraction.
- ``versions``  ``WeightPublisher`` / ``WeightReceiver``: version tracking, delta chains or a full copy.
- ``topology``  pure fan-out routes inside a site (tree or ring).
- ``site``      a site that takes one copy in shards, one per member, then fans each out (``harvest:``); the
                relay that runs it is ``rollarc.runtime.site_relay`` (training and ``bench weightsync``).
"""
