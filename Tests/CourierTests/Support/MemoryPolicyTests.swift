import Courier
import Testing

@Suite("Memory policy")
struct MemoryPolicyTests {
    @Test("applied unless GLIBC_TUNABLES names a malloc setting, which is kept as the user set it")
    func userTunablesWin() {
        #expect(MemoryPolicy.apply(environment: [:]))
        #expect(MemoryPolicy.apply(environment: ["GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"]))
        #expect(!MemoryPolicy.apply(environment: ["GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"]))
        #expect(!MemoryPolicy.apply(environment: ["GLIBC_TUNABLES": "glibc.rtld.nns=2:glibc.malloc.mmap_threshold=1"]))
    }
}
