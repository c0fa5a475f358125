"""Offset translation through exact syncs, and the syncs topic on a real broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.kafka import config_file
from mirrorflow.config.loader import load_config
from mirrorflow.kafka.records import OffsetSync
from mirrorflow.source import offset_syncs
from mirrorflow.source.offset_syncs import translate


def syncs(*pairs: tuple[int, int]) -> list[OffsetSync]:
    return [OffsetSync("t", 0, up, down) for up, down in pairs]


# Upstream 0..9 contiguous (downstream 100..109), then a gap: 20..24 -> 110..114.
HISTORY = syncs((0, 100), (9, 109), (20, 110), (24, 114))


@pytest.mark.parametrize("upstream,expected", [
    (0, 100), (5, 105), (9, 109),      # inside the first run: exact
    (10, 110), (15, 110), (19, 110),   # in the gap: the next mirrored record
    (20, 110), (23, 113), (24, 114),   # inside the second run
    (25, 115), (1000, 115),            # beyond what is mirrored: its end, never further
])
def test_translation_is_exact_and_never_skips(upstream: int, expected: int) -> None:
    assert translate(HISTORY, upstream) == expected


def test_translation_before_first_sync_or_without_syncs() -> None:
    assert translate(syncs((50, 0), (99, 49)), 10) is None
    assert translate([], 10) is None


def test_downstream_markers_between_runs_are_respected() -> None:
    # Apache Kafka commit markers take a downstream offset between transaction chunks.
    history = syncs((0, 0), (99, 99), (100, 101), (150, 151))
    assert translate(history, 99) == 99
    assert translate(history, 100) == 101
    assert translate(history, 151) == 152


@pytest.mark.broker
def test_emit_and_read_back_with_reset_invalidating_later_syncs(
        two_clusters: dict[str, str], tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path / "c.properties", two_clusters,
                                     "a->b.enabled = true"))
    flow = config.flow("a->b")
    topic = offset_syncs.offset_syncs_topic(config, flow)
    assert (topic.cluster.alias, topic.topic) == ("a", "mm2-offset-syncs.b.internal")
    offset_syncs.emit(config, flow, [*syncs((0, 0), (999, 999)), OffsetSync("u", 1, 5, 7)])
    # The partition was reset and mirrored again: the new history replaces the old.
    offset_syncs.emit(config, flow, syncs((0, 1000), (499, 1499)))
    topic.write([(b"junk", b"not a sync")])
    read = offset_syncs.read(config, flow)
    assert read[("t", 0)] == syncs((0, 1000), (499, 1499))
    assert read[("u", 1)] == [OffsetSync("u", 1, 5, 7)]


@pytest.mark.broker
def test_target_location(two_clusters: dict[str, str], tmp_path: Path) -> None:
    config = load_config(config_file(tmp_path / "c.properties", two_clusters,
                                     "a->b.enabled = true",
                                     "offset-syncs.topic.location = target\n"))
    topic = offset_syncs.offset_syncs_topic(config, config.flow("a->b"))
    assert (topic.cluster.alias, topic.topic) == ("b", "mm2-offset-syncs.a.internal")
