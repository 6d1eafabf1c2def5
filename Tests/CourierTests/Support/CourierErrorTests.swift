import Courier
import Foundation
import Testing

@Suite("CourierError")
struct CourierErrorTests {
    @Test("every code maps to the exit code of DESIGN.md")
    func exitCodes() {
        let expected: [(CourierError.Code, Int32)] = [
            (.receiptInvalid, 3), (.notEntitled, 3), (.serverRejected, 8),
            (.insufficientSpace, 4), (.network, 5), (.integrity, 6), (.hostilePackage, 6),
            (.paused, 7), (.usage, 2), (.internal, 1), (.cancelled, 1), (.io, 1),
        ]
        for (code, exit) in expected {
            #expect(CourierError(code, "x").exitCode == exit, "\(code)")
        }
    }

    @Test("ENOSPC becomes insufficientSpace")
    func enospc() {
        #expect(CourierError.posix("write", errno: ENOSPC).code == .insufficientSpace)
        #expect(CourierError.posix("write", errno: EACCES).code == .io)
    }
}
