import CourierTestSupport
import Foundation
import Testing

@testable import Courier

#if canImport(Glibc)
import Glibc
#endif

@Suite("AgentQueueControl: the socket's blocking I/O stays off the cooperative pool")
struct AgentQueueControlTests {
    @Test("more commands waiting on a silent agent than the pool has threads: other tasks still run at once")
    func silentAgentBlocksNoCooperativeThread() async throws {
        let directory = try TemporaryDirectory(prefix: "courier-aqc")
        defer { directory.remove() }
        let listener = try UnixSocketListener(path: directory.appending("agent.sock").path)
        defer { Glibc.close(listener.descriptor) }
        // One more command than the cooperative pool has threads, each on its own connection.
        let count = ProcessInfo.processInfo.activeProcessorCount + 1
        let clients = try (0..<count).map { _ in try AgentClient(socketPath: listener.path, timeout: 60) }
        let peers = (0..<count).map { _ in accept(listener.descriptor, nil, nil) }
        #expect(peers.allSatisfy { $0 >= 0 })
        // A watchdog on a Dispatch thread: after 5 s the silent agent hangs up, so a pool whose
        // threads are all blocked in read() is freed (and this test measures the delay).
        DispatchQueue.global().asyncAfter(deadline: .now() + 5) {
            for peer in peers { shutdown(peer, Int32(SHUT_RDWR)) }
        }
        defer { for peer in peers { Glibc.close(peer) } }
        let start = ContinuousClock.now
        let commands = clients.map { client in
            Task { try await AgentQueueControl(agent: client).perform(.list(includeFinished: false, stalledOnly: false)) }
        }
        // Every request has reached the agent (checked on a Dispatch thread): each command now
        // waits in a blocking read for an answer that does not come.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                var fds = peers.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                let deadline = ContinuousClock.now + .seconds(60)
                while ContinuousClock.now < deadline {
                    _ = poll(&fds, nfds_t(fds.count), 100)
                    if fds.allSatisfy({ $0.revents & Int16(POLLIN) != 0 }) { break }
                    for index in fds.indices { fds[index].revents = 0 }
                }
                continuation.resume()
            }
        }
        // A task that needs a cooperative thread runs at once, long before the agent hangs up
        // (blocked cooperative threads would let nothing run until then, not even this test).
        let probe = await Task { ContinuousClock.now }.value
        #expect(probe - start < .seconds(4), "a task waited \(probe - start) for a cooperative thread")
        for peer in peers { shutdown(peer, Int32(SHUT_RDWR)) }
        for command in commands {
            await #expect(throws: CourierError.self) { try await command.value }
        }
    }
}
