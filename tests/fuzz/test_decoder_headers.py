"""Each C decoder shardscope calls, fed real chunks with one lying header field, in a child process.

A mutated decode must raise a typed error or give back data of the size the spec implies; for the
codecs whose header fields are all pinned (:data:`tests.fuzz.decoders.EXACT_CODECS`: compresso,
checksummed and size-declaring streams) a decode that does not raise must give back exactly what
was encoded. The decodes run in a child process (:class:`tests.fuzz.decoders.DecoderChild`): a
segmentation fault is a failed test naming the field and value, not a dead pytest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.decoders import (
    FINDING_OUTCOMES,
    HOSTILE_VALUES,
    DecoderChild,
    Sample,
    decode_here,
    mutate,
    samples,
)


@pytest.fixture(scope="module")
def child() -> Iterator[DecoderChild]:
    c = DecoderChild()
    yield c
    c.close()


def test_every_sample_decodes_to_what_its_writer_encoded() -> None:
    # The mutation tests mean something only if the unmutated chunks decode exactly (and cover every decoder).
    from tests.fuzz.decoders import DECODERS

    assert {s.codec for s in samples()} == set(DECODERS)
    for s in samples():
        status, digest, size = decode_here(s.codec, s.data, s.params)
        assert (status, digest, size) == ("ok", s.digest, len(s.expected)), s.name


def test_the_child_reports_a_segfault_as_a_crash(child: DecoderChild) -> None:
    # The harness itself: a decoder that kills its process is a "crash" verdict, and the next decode
    # runs in a fresh child.
    sample = samples()[0]
    status, detail, _ = child.decode("crash_for_test", b"", {})
    assert status == "crash" and "-11" in detail
    assert child.judge(sample, sample.data).outcome == "exact"


@pytest.mark.parametrize("sample", samples(), ids=lambda s: s.name)
def test_every_header_field_lie_is_typed_or_exact(sample: Sample, child: DecoderChild) -> None:
    # Issue 27: compresso's location_size 4080 -> 17 killed the process; a lying id_size, xstep or value_size
    # decoded to thousands of wrong voxels. Every field of every sample, every hostile value, off-by-one lies.
    findings = []
    for field in sample.fields:
        at = field.at(len(sample.data))
        orig = int.from_bytes(sample.data[at:at + field.width], "little")
        for value in {*HOSTILE_VALUES, orig + 1, max(0, orig - 1), 2 * orig, orig // 2, orig ^ 1}:
            data = mutate(sample, field, value)
            if data == sample.data:
                continue
            verdict = child.judge(sample, data, field.pinned)
            if verdict.outcome in FINDING_OUTCOMES:
                findings.append((field.name, value, verdict))
    assert findings == []


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_lying_header_field_of_any_decoder_is_typed_or_decodes_exactly(data: st.DataObject,
                                                                         child: DecoderChild) -> None:
    sample = data.draw(st.sampled_from(samples()), label="sample")
    field = data.draw(st.sampled_from(sample.fields), label="field")
    value = data.draw(st.one_of(st.sampled_from(HOSTILE_VALUES), st.integers(0, (1 << (8 * field.width)) - 1)),
                      label="value")
    mutated = mutate(sample, field, value)
    verdict = child.judge(sample, mutated, field.pinned)
    assert verdict.outcome not in FINDING_OUTCOMES, (sample.name, field.name, value, verdict)
