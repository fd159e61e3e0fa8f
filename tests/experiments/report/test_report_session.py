"""The shared SparkSession's driver JVM runs with the options the report was measured with."""

from experiments.report.session import JAVA_OPTIONS


def test_the_driver_jvm_compiles_with_c1_only_collects_with_the_serial_gc_and_skips_the_verifier(spark):
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = set(runtime.getInputArguments())
    assert set(JAVA_OPTIONS.split()) <= arguments
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-BytecodeVerificationRemote"} <= arguments
    flags = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        spark.sparkContext._jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert flags.getVMOption("BytecodeVerificationRemote").getValue() == "false"
    assert int(flags.getVMOption("ReservedCodeCacheSize").getValue()) == 256 * 2**20  # not C1's own 48 MB
