#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// How the process's allocator keeps memory it freed: for a process that moves packages through
/// buffers of a few hundred KB, as every transfer does, the heap keeps what it freed and the next
/// buffer reuses it, rather than handing the pages back to the kernel and faulting them in again.
///
/// glibc's defaults serve a buffer of 128 KB or more with its own `mmap` at first, and later,
/// once its thresholds adapt, trim the top of an arena whenever twice that is free there. A
/// download's 256 KB receive buffer is allocated on the curl thread and freed by the check on
/// another, so the arena's top came and went: 9,000-14,000 page faults per 500-package prestage
/// run where 4,300 remain with this, each a zeroed page (and on a virtual machine whose freed
/// pages its host reclaims, a fault there too).
///
/// Allocations below `mmapThreshold` come from the heap; at most `trimThreshold` of free memory
/// at the top of an arena is kept. What this keeps is bounded by the peak the process reached:
/// its resident size after a burst stays at that peak rather than shrinking. So `courier
/// prestage`, a batch job, applies it; `courier get` does not (its peak resident size rose from
/// 35.0 to 37.1 MiB with it, against a goal of 40). A `GLIBC_TUNABLES` naming a `glibc.malloc`
/// setting wins: the user's setting is kept as it is.
public enum MemoryPolicy {
    public static let mmapThreshold: Int32 = 8 << 20
    public static let trimThreshold: Int32 = 64 << 20

    /// Applies the policy (at the start of a command). Returns whether it did.
    @discardableResult
    public static func apply(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        #if canImport(Glibc)
        if let tunables = environment["GLIBC_TUNABLES"], tunables.contains("glibc.malloc.") { return false }
        // `mallopt` and its parameters are declared in <malloc.h>, which the Glibc module does not
        // import: the function is looked up in the process, the parameters are glibc's (stable)
        // values. It returns 1 on success.
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        guard let process = dlopen(nil, RTLD_NOW), let symbol = dlsym(process, "mallopt") else { return false }
        let mallopt = unsafeBitCast(symbol, to: Mallopt.self)
        let trimThresholdParameter: Int32 = -1  // M_TRIM_THRESHOLD
        let mmapThresholdParameter: Int32 = -3  // M_MMAP_THRESHOLD
        return mallopt(mmapThresholdParameter, mmapThreshold) == 1 && mallopt(trimThresholdParameter, trimThreshold) == 1
        #else
        return false
        #endif
    }
}
