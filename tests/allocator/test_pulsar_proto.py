"""Against Pulsar's own schema: classes generated here, by grpcio-tools' protoc, from the .proto in the repository
(Pulsar's, unchanged) read what quotalab writes, and the committed `ResourceUsage_pb2.py` is what protoc makes
of that .proto today. Skipped without grpcio-tools (`pip install -e '.[proto]'`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from allocator.wire.pulsar import ResourceUsage_pb2, usage_info
from allocator.wire.report_fields import DIMENSIONS
from allocator.wire.usage_report import UsageReport

protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools is not installed (pip install -e '.[proto]')")

PROTO = Path(ResourceUsage_pb2.__file__).with_name("ResourceUsage.proto")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    """The .proto compiled by protoc into a descriptor set (and Python classes, to show they generate)."""
    out = tmp_path_factory.mktemp("protoc")
    descriptor_set = out / "resource_usage.desc"
    arguments = [f"-I{PROTO.parent}", f"--python_out={out}", f"--descriptor_set_out={descriptor_set}", PROTO.name]
    assert protoc.main(["protoc", *arguments]) == 0
    assert (out / "ResourceUsage_pb2.py").exists()
    (file,) = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes()).file
    return file


def test_a_report_encoded_by_quotalab_parses_with_classes_generated_from_pulsars_proto(compiled) -> None:
    pool = descriptor_pool.DescriptorPool()  # its own pool: the committed classes hold the default one's names
    pool.Add(compiled)
    info_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("pulsar.resource.usage.ResourceUsageInfo"))
    usage = np.array([[120.0, 96_000.0, 110.0, 88_000.0], [3.4, 2_720.6, 0.0, 0.0]])
    report = UsageReport("pulsar://broker-1:6650", 0, 1, 0, 60_000, DIMENSIONS, np.array([4, 9]), usage)
    names = {4: "tenant-a/ns-1", 9: "rg-bulk"}
    (payload,) = usage_info.encode_split(report, np.array([0, 1]), np.array([0, 2]), names, interval_s=60.0)

    info = info_class.FromString(payload)
    assert info.IsInitialized()
    assert info.broker == "pulsar://broker-1:6650"
    assert [entry.owner for entry in info.usageMap] == ["tenant-a/ns-1", "rg-bulk"]
    rows = [
        [e.publish.messagesPerPeriod, e.publish.bytesPerPeriod, e.dispatch.messagesPerPeriod, e.dispatch.bytesPerPeriod]
        for e in info.usageMap
    ]
    assert rows == [[7200, 5_760_000, 6600, 5_280_000], [204, 163_236, 0, 0]]  # per 60-s period, rounded
    assert not info.usageMap[0].HasField("storage") and not info.usageMap[0].replicator


def test_the_committed_classes_are_what_protoc_makes_of_the_proto(compiled) -> None:
    committed = descriptor_pb2.FileDescriptorProto.FromString(ResourceUsage_pb2.DESCRIPTOR.serialized_pb)
    fresh = descriptor_pb2.FileDescriptorProto()
    fresh.CopyFrom(compiled)
    for message in fresh.message_type:  # a descriptor set names each field's JSON name; generated code does not
        for field in message.field:
            field.ClearField("json_name")
    assert committed == fresh
    assert [message.name for message in committed.message_type] == [
        "NetworkUsage", "StorageUsage", "ReplicatorUsage", "ResourceUsage", "ResourceUsageInfo"
    ]  # fmt: skip
