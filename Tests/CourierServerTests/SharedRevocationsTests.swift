import Courier
import CourierServer
import CourierTestSupport
import Foundation
import Testing

/// Gates on one storage root share `origin.sqlite` (`SharedRevocations`): every commit another
/// gate makes is seen at the next question (issue 29, §9).
@Suite("SharedRevocations: every refund another gate commits is seen", .serialized)
struct SharedRevocationsTests {
    /// A folder on a filesystem whose timestamps tick once a second: ext2 with 128-byte inodes
    /// (no sub-second times, as on older and network filesystems) in an image file the test
    /// makes and mounts on a loop device. nil where mounting is not allowed (no CAP_SYS_ADMIN).
    final class CoarseFolder {
        let scratch: TemporaryDirectory
        let mountPoint: URL

        private init(scratch: TemporaryDirectory, mountPoint: URL) {
            self.scratch = scratch
            self.mountPoint = mountPoint
        }

        static func make() -> CoarseFolder? {
            guard let scratch = try? TemporaryDirectory(prefix: "courier-coarse") else { return nil }
            let image = scratch.appending("fs.img").path
            let mountPoint = scratch.appending("mnt")
            let script = """
                set -e
                truncate -s 16M '\(image)'
                PATH=$PATH:/sbin:/usr/sbin mkfs.ext2 -q -F -I 128 '\(image)' 2>/dev/null
                mkdir '\(mountPoint.path)'
                mount -o loop '\(image)' '\(mountPoint.path)'
                """
            guard let result = try? Shell.run("/bin/sh", ["-c", script]), result.status == 0 else {
                print("note: cannot mount a filesystem with one-second timestamps here; the commits run on the temporary folder's")
                scratch.remove()
                return nil
            }
            return CoarseFolder(scratch: scratch, mountPoint: mountPoint)
        }

        func remove() {
            _ = try? Shell.run("/bin/umount", [mountPoint.path])
            _ = try? Shell.run("/bin/umount", ["-l", mountPoint.path])
            scratch.remove()
        }
    }

    static func verified(_ body: Data, _ stack: NotificationTests.Stack) async throws -> VerifiedServerNotification {
        let (signedPayload, _) = try ServerNotification.decode(body: body)
        return try await stack.verifier.verifyNotification(signedPayload, now: Date())
    }

    @Test("two refunds committed within one tick of the file's timestamps are both seen by the other gate")
    func twoCommitsWithinOneTick() async throws {
        let stack = try NotificationTests.Stack()
        defer { stack.fixture.folder.remove() }
        let coarse = CoarseFolder.make()
        defer { coarse?.remove() }
        let folder = coarse?.mountPoint.appendingPathComponent("state") ?? stack.stateFolder
        var withinOneSecond = 0
        do {
            // One gate records (its notification receiver's store), another only reads.
            let writer = try OriginStateStore(directory: folder)
            let reader = try SharedRevocations(directory: folder)
            for pair in 0..<20 {
                let ids = ["40000000000\(1000 + 2 * pair)", "40000000000\(1001 + 2 * pair)"]
                var notifications: [VerifiedServerNotification] = []
                for id in ids {
                    notifications.append(
                        try await Self.verified(try stack.body("REFUND", signedDate: Date().addingTimeInterval(-60), transactionId: id), stack))
                }
                // A commit, a question that sees it, a second commit: well within one second.
                let start = Date()
                _ = try writer.apply(notifications[0], now: Date())
                let sawFirst = reader.isRevoked(ids[0])
                _ = try writer.apply(notifications[1], now: Date())
                let end = Date()
                if Int(start.timeIntervalSince1970) == Int(end.timeIntervalSince1970) { withinOneSecond += 1 }
                #expect(sawFirst, "pair \(pair): the first refund was not seen")
                #expect(reader.isRevoked(ids[1]), "pair \(pair): the second refund, committed within the same second, was not seen")
                #expect(reader.isPurchaseRevoked(originalTransactionId: ids[1]))
            }
        }
        if coarse != nil { #expect(withinOneSecond > 0, "no pair of commits fell within one second") }
    }

    @Test("a refund of a restored copy recorded by one gate refuses the original's token at another gate on the same storage")
    func restoredCopyAcrossGates() async throws {
        let stack = try NotificationTests.Stack()
        defer { stack.fixture.folder.remove() }
        let writer = try OriginStateStore(directory: stack.stateFolder)
        let reader = try SharedRevocations(directory: stack.stateFolder)
        let origin = try await RunningOrigin.start(
            content: stack.fixture.url, gate: ReceiptAccessGate(verifier: stack.verifier, revocations: reader))
        let tokens = try NotificationTests.purchaseTokens(stack)
        for token in tokens { #expect(try await NotificationTests.download(origin, token: token) == 200) }
        let refund = try stack.body(
            "REFUND", signedDate: Date().addingTimeInterval(-60), transactionId: NotificationTests.copies[1],
            originalTransactionId: NotificationTests.original)
        #expect(try writer.apply(try await Self.verified(refund, stack), now: Date()) == .revoked)
        for token in tokens { #expect(try await NotificationTests.download(origin, token: token) == 403) }
        try await origin.stop()
    }
}
