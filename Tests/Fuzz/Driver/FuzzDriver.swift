// The libFuzzer entry point, linked by `scripts/fuzz` with `swiftc -sanitize=fuzzer,address
// -parse-as-library` against the CourierFuzzTargets library; libFuzzer supplies `main`.
// It imports nothing: the library exports `courier_fuzz_one` (Tests/Fuzz/Targets), which reads
// the target's name from COURIER_FUZZ_TARGET once, so one binary serves every target.

@_silgen_name("courier_fuzz_one")
func courierFuzzOne(_ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Int32

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Int32 {
    courierFuzzOne(bytes, count)
}
