import Courier
import CourierTestSupport
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// SIGTERM while clients keep connecting to the control socket: connections accepted but not
/// yet served must be closed, not dropped (a dropped NIO child channel's writer traps with
/// "Deinited NIOAsyncWriter without calling finish()", apple/swift-nio #2637).
@Suite("courier agent: shutdown under connecting clients", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct AgentShutdownTests {
    @Test("SIGTERM while clients connect and ask, over and over: the agent exits 0 every time, socket removed")
    func sigtermUnderConnections() throws {
        let shop = try AgentShop()
        defer { shop.stop() }
        for round in 0..<6 {
            let storage = shop.storage("Storage-\(round)")
            let agent = try shop.startAgent(storage: storage)
            defer { if agent.isRunning { _ = stopProcess(agent, signal: SIGKILL) } }
            let socket = StorageLayout(root: storage).agentSocket.path
            let stop = Atomic<Bool>(false)
            let connected = Atomic<Int>(0)
            let finished = DispatchGroup()
            for client in 0..<4 {
                finished.enter()
                Thread.detachNewThread {
                    defer { finished.leave() }
                    while !stop.load(ordering: .relaxed) {
                        var ok = false
                        if client % 2 == 0 {
                            // Connect and hang up at once: a child channel with nothing to read.
                            ok = Loopback.acceptsUnixConnection(socket)
                        } else if let agentClient = try? AgentClient(socketPath: socket, timeout: 2) {
                            ok = true
                            _ = try? agentClient.send(AgentRequest(.list))
                        }
                        if ok { connected.add(1, ordering: .relaxed) } else { usleep(5_000) }
                    }
                }
            }
            // Signal once connections are flowing (however many: the count is no assertion).
            _ = waitUntil(30) { connected.load(ordering: .relaxed) > 50 }
            kill(agent.processIdentifier, SIGTERM)
            // Clients go on for a moment while the agent shuts down, then stop.
            usleep(300_000)
            stop.store(true, ordering: .relaxed)
            finished.wait()
            let exited = waitUntil(60) { !agent.isRunning }
            if exited { agent.waitUntilExit() }
            #expect(exited, "round \(round): the agent did not exit")
            #expect(agent.terminationReason == .exit && agent.terminationStatus == 0, "round \(round): \(agent.terminationReason) \(agent.terminationStatus)")
            #expect(!FileManager.default.fileExists(atPath: socket), "round \(round)")
        }
    }

    @Test("SIGHUP reloads the rate limits from the edited file; a bad file keeps them and says why; the agent runs on")
    func sighupReload() throws {
        let shop = try AgentShop()
        defer { shop.stop() }
        func write(_ json: String) throws { try Data(json.utf8).write(to: shop.configFile) }
        try write(#"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}, "transfer": {"maxRate": "8M"}}"#)
        let storage = shop.storage()
        let agent = try shop.startAgent(storage: storage)
        defer { if agent.isRunning { _ = stopProcess(agent, signal: SIGKILL) } }
        let logs = try FileManager.default.contentsOfDirectory(at: shop.directory.url, includingPropertiesForKeys: nil)
            .filter { $0.lastPathComponent.hasPrefix("agent-") && $0.pathExtension == "log" }
        let logFile = try #require(logs.first)
        func log() -> String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }
        #expect(log().contains("max-rate=8M"), "\(log())")

        try write(
            #"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}, "transfer": {"maxRate": "3M", "backgroundMaxRate": "1M", "rateSchedule": [{"from": "09:00", "to": "17:00", "maxRate": "500k"}]}}"#
        )
        kill(agent.processIdentifier, SIGHUP)
        #expect(waitUntil(30) { log().contains("configuration reloaded") }, "\(log())")
        let reloaded = log().split(separator: "\n").first { $0.contains("configuration reloaded") }.map(String.init) ?? ""
        #expect(reloaded.contains("max-rate=3M") && reloaded.contains("background-max-rate=1M"), "\(reloaded)")
        #expect(reloaded.contains("rate-schedule=09:00-17:00=500k/none"), "\(reloaded)")

        try write(#"{"transfer": {"maxRate": "fast"}}"#)
        kill(agent.processIdentifier, SIGHUP)
        #expect(waitUntil(30) { log().contains("cannot reload the configuration") }, "\(log())")
        let refused = log().split(separator: "\n").first { $0.contains("cannot reload") }.map(String.init) ?? ""
        #expect(refused.contains("transfer.maxRate") && refused.contains("keeping the one in force"), "\(refused)")
        // Still serving, with the limits of the last good file.
        #expect(agent.isRunning)
        #expect((try? AgentClient(socketPath: StorageLayout(root: storage).agentSocket.path, timeout: 10).send(AgentRequest(.list)))?.ok == true)
        #expect(stopProcess(agent))
        #expect(agent.terminationStatus == 0)
    }
}
