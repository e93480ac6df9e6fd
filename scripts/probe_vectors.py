"""Write the noise probes' vectors that `lookup-knowledge index` reads instead of embedding them (D60).

    python scripts/probe_vectors.py [--model multilingual-e5-small]

Run it after changing the probes (`components.store.collection_statistics.noise_probes`) or the shipped lookup model:
an index run checks the file against the model (it embeds two probes) and embeds all of them when it does not match.
"""

from __future__ import annotations

import argparse

import numpy as np

from components.core.embedding_backends import E5_SMALL, get_backend
from components.store.collection_statistics import embed_probes, noise_probes, probe_vectors_file


def main(argv: list[str] | None = None) -> int:
    """
    Embed the probes with a model and write their vectors where index runs look for them.

    :param argv: Arguments (default: the process').
    :returns: The exit code.
    """
    parser = argparse.ArgumentParser(
        prog="python scripts/probe_vectors.py", description="Write the noise probes' vectors that index runs read."
    )
    parser.add_argument("--model", default=E5_SMALL, help=f"the lookup embedding model (default {E5_SMALL})")
    args = parser.parse_args(argv)
    texts = noise_probes()
    path = probe_vectors_file(texts, args.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{args.model}-*.npy"):
        stale.unlink()
    with path.open("wb") as handle:
        np.save(handle, embed_probes(texts, get_backend(args.model).embed_queries), allow_pickle=False)
    print(f"wrote {len(texts)} probe vectors to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
