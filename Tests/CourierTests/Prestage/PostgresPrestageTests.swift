import Courier
import CourierTestSupport
import Crypto
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The hosts the workers of a multi-worker test run on: three network namespaces on a bridge of
/// this namespace (a LAN: the servers at 10.231.S.1/24 here, worker k at 10.231.S.k+2 there; the
/// test made every address and link, and nothing is routed beyond them), or, where namespaces
/// cannot be made (no CAP_SYS_ADMIN in CI), three processes on loopback.
struct WorkerHosts {
    /// Per worker: its namespace, nil on loopback.
    var namespaces: [String?]
    /// The address every worker reaches PostgreSQL and nginx at (the servers listen there too).
    var serverAddress: String
    var bridge: String?
    var network: String?
    /// Why the workers run on loopback, when they do.
    var note: String?

    static func make(count: Int) -> WorkerHosts {
        let tag = String(format: "%06x", UInt32.random(in: 0..<0xFF_FFFF))
        let subnet = Int.random(in: 0..<256)
        let bridge = "cwb\(tag)"
        var made: [String] = []
        var madeBridge = false
        func ip(_ arguments: [String]) throws {
            let result = try Shell.run("/usr/sbin/ip", arguments)
            guard result.status == 0 else { throw PostgresServer.Failure("ip \(arguments.joined(separator: " ")): \(result.stderr)") }
        }
        do {
            let server = "10.231.\(subnet).1"
            try ip(["link", "add", bridge, "type", "bridge"])
            madeBridge = true
            try ip(["addr", "add", "\(server)/24", "dev", bridge])
            try ip(["link", "set", bridge, "up"])
            for index in 0..<count {
                let namespace = "courier-\(tag)-\(index)"
                let outside = "cwh\(tag)\(index)"
                let inside = "cwn\(tag)\(index)"
                try ip(["netns", "add", namespace])
                made.append(namespace)
                try ip(["link", "add", outside, "type", "veth", "peer", "name", inside])
                try ip(["link", "set", outside, "master", bridge])
                try ip(["link", "set", outside, "up"])
                try ip(["link", "set", inside, "netns", namespace])
                try ip(["netns", "exec", namespace, "ip", "addr", "add", "10.231.\(subnet).\(index + 2)/24", "dev", inside])
                try ip(["netns", "exec", namespace, "ip", "link", "set", inside, "up"])
                try ip(["netns", "exec", namespace, "ip", "link", "set", "lo", "up"])
            }
            return WorkerHosts(namespaces: made, serverAddress: server, bridge: bridge, network: "10.231.\(subnet).0/24")
        } catch {
            for namespace in made { _ = try? Shell.run("/usr/sbin/ip", ["netns", "del", namespace]) }
            if madeBridge { _ = try? Shell.run("/usr/sbin/ip", ["link", "del", bridge]) }
            let note = "network namespaces are not available here (\(error)); the three workers run as processes on loopback"
            print("note: \(note)")
            return WorkerHosts(namespaces: Array(repeating: nil, count: count), serverAddress: "127.0.0.1", note: note)
        }
    }

    /// Deletes the namespaces (their veth ends and peers go with them) and the bridge.
    func remove() {
        for case let namespace? in namespaces {
            _ = try? Shell.run("/usr/sbin/ip", ["netns", "del", namespace])
        }
        if let bridge { _ = try? Shell.run("/usr/sbin/ip", ["link", "del", bridge]) }
    }

    /// Starts `courier ARGS` as worker `index` (inside its namespace, if any).
    func start(_ index: Int, _ arguments: [String], output: URL, errors: URL) throws -> Process {
        if let namespace = namespaces[index] {
            return try CourierBinary.start(
                ["netns", "exec", namespace, CourierBinary.url.path] + arguments, stdout: output, stderr: errors,
                executable: URL(fileURLWithPath: "/usr/sbin/ip"))
        }
        return try CourierBinary.start(arguments, stdout: output, stderr: errors)
    }
}

/// The NDJSON events of a worker's standard output file.
func events(in file: URL) -> [[String: Any]] {
    let text = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
    return text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
}

/// Waits up to `timeout` seconds for `process` to exit; kills it and returns false if it does not.
func waitForExit(_ process: Process, timeout: Double = 180) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning, Date() < deadline { usleep(20_000) }
    if process.isRunning {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return false
    }
    return true
}

/// Polls `condition` every 20 ms for up to `timeout` seconds (an event in another process).
@discardableResult
func waitUntil(timeout: Double = 120, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return true }
        usleep(20_000)
    }
    return false
}

@Suite(
    "courier prestage --queue postgresql://", .serialized,
    .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct PostgresPrestageTests {
    static func packageRequests(_ nginx: NginxServer) -> [String] {
        nginx.accessLog().filter { $0.contains(".zip") }
    }

    static func sha256(_ data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    /// Every listed package is published once at its path with the upstream's bytes, no
    /// temporary file is left, and `published` lists exactly `expected`.
    static func checkStaged(_ dest: TemporaryDirectory, upstream: UpstreamFixture, expected: [String]) throws {
        let published = try Catalog.decode(Data(contentsOf: dest.appending("catalog.json")))
        #expect(published.products.map(\.productId).sorted() == expected.sorted())
        for product in published.products {
            let content = try #require(product.content)
            let staged = try Data(contentsOf: dest.url.appendingPathComponent(content.url))
            #expect(Self.sha256(staged) == content.sha256)
            let original = try (try? upstream.data(product.productId)) ?? upstream.data("slow/" + product.productId)
            #expect(staged == original)
            let folder = dest.url.appendingPathComponent(content.url).deletingLastPathComponent()
            // Beside the package: its entry manifest (delta updates), nothing else.
            let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasSuffix(".manifest.json") }
            #expect(files == [URL(fileURLWithPath: content.url).lastPathComponent], "\(product.productId): \(files)")
        }
    }

    @Test("one process with --queue: SIGINT hands the task back (exit 7), the next run finishes the same run, a third inserts and fetches nothing; metrics at /metrics")
    func queueRunsAreIdempotent() throws {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
        let server = try PostgresServer()
        defer { server.stop() }
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        try upstream.addProduct("com.example.fast1")
        try upstream.addProduct("com.example.fast2")
        try upstream.addProduct("com.example.slow", bytes: 400_000, folder: "slow/")
        try upstream.writeCatalog()
        let nginx = try NginxServer(root: upstream.root.url, extraLocations: "location /slow/ { limit_rate 40k; }")
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        let arguments = [
            "prestage", "--catalog", nginx.url("catalog.json").absoluteString, "--dest", dest.path, "--queue", server.url,
            "--jobs", "3", "--json",
        ]
        let output = dest.appending("first.out")
        let errors = dest.appending("first.err")
        let first = try CourierBinary.start(arguments + ["--metrics-port", "0"], stdout: output, stderr: errors)
        defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
        let metricsPort = try #require(
            waitUntil { events(in: output).contains { $0["event"] as? String == "metrics" } || !first.isRunning }
                ? events(in: output).first { $0["event"] as? String == "metrics" }?["port"] as? Int : nil,
            "no metrics event: \((try? String(contentsOf: errors, encoding: .utf8)) ?? "")")
        var scraped = ""
        let sawMetrics = waitUntil {
            scraped = (try? Shell.run("/usr/bin/curl", ["-s", "http://127.0.0.1:\(metricsPort)/metrics"]).stdout) ?? ""
            return scraped.contains("courier_prestage_tasks_staged_total 2") && scraped.contains("courier_prestage_tasks_claimed_total 3")
        }
        #expect(sawMetrics, "metrics: \(scraped)")
        #expect(scraped.contains("courier_prestage_bytes_fetched_total"))
        #expect(scraped.contains("courier_prestage_task_duration_seconds_bucket"))
        #expect(first.isRunning, "the slow package should still be downloading")
        kill(first.processIdentifier, SIGINT)
        #expect(waitForExit(first))
        #expect(first.exitStatus == 7, "\((try? String(contentsOf: errors, encoding: .utf8)) ?? "")")
        #expect(try server.psql("SELECT state FROM prestage_task WHERE content_identifier = 'com.example.slow'") == "waiting")
        #expect(!FileManager.default.fileExists(atPath: dest.appending("catalog.json").path), "the run is not complete")

        let second = try CourierBinary.run(arguments)
        #expect(second.status == 0, "\(second.stderr)")
        try Self.checkStaged(dest, upstream: upstream, expected: ["com.example.fast1", "com.example.fast2", "com.example.slow"])
        #expect(try server.psql("SELECT count(*) FROM prestage_task") == "3")
        #expect(try server.psql("SELECT count(*) || ' ' || string_agg(state, ',') FROM prestage_run") == "1 published")
        #expect(second.events.filter { $0["event"] as? String == "published" && $0["changed"] as? Bool == true }.count == 1)

        let requests = Self.packageRequests(nginx).count
        let catalog = try Data(contentsOf: dest.appending("catalog.json"))
        let third = try CourierBinary.run(arguments)
        #expect(third.status == 0, "\(third.stderr)")
        #expect(try server.psql("SELECT count(*) FROM prestage_task") == "3", "a re-run with nothing new inserted tasks")
        #expect(try server.psql("SELECT count(*) FROM prestage_run") == "1", "a re-run with nothing new inserted a run")
        #expect(Self.packageRequests(nginx).count == requests, "a re-run with nothing new fetched packages")
        #expect(try Data(contentsOf: dest.appending("catalog.json")) == catalog)
        #expect(third.events.last?["unchanged"] as? Int == 3)
    }

    /// Three workers on one PostgreSQL and one nginx; `kill -9` of one of them mid-transfer
    /// (`killCoordinator`: the one that planned the run, started alone first).
    func threeWorkers(killCoordinator: Bool) throws {
        #expect(PostgresServer.isAvailable, "\(PostgresServer.unavailableReason)")
        let hosts = WorkerHosts.make(count: 3)
        defer { hosts.remove() }
        let onBridge = hosts.bridge != nil
        let server = try PostgresServer(
            extraListenAddresses: onBridge ? [hosts.serverAddress] : [], trustedNetworks: hosts.network.map { [$0] } ?? [])
        defer { server.stop() }
        var upstream = try UpstreamFixture()
        defer { upstream.root.remove() }
        // Enough packages that the first process (which may claim 4 at a time, 2 running) cannot
        // finish the run before the other two have joined it: with 9 it once did (2 s a package).
        let names = (1...18).map { "com.example.pack\($0)" }
        for name in names { try upstream.addProduct(name, bytes: 200 * 1024) }
        upstream.addMissingProduct("com.example.missing")
        try upstream.writeCatalog()
        let listen = onBridge ? "listen \(hosts.serverAddress):80;" : ""
        let nginx = try NginxServer(root: upstream.root.url, extraLocations: "limit_rate 100k; \(listen)")
        defer { nginx.stop() }
        let dest = try TemporaryDirectory(prefix: "courier-stage")
        defer { dest.remove() }
        // Plain http beyond loopback is allowed only where the configuration says so.
        // The upstream is another host (a namespace's address), and its catalog is not signed:
        // a deployment says so (docs/trust.md).
        try Data(#"{"transfer": {"allowInsecureHTTP": true}, "catalog": {"allowUnsigned": true}}"#.utf8)
            .write(to: dest.appending("courier.json"))

        func arguments(_ index: Int) -> [String] {
            let address = hosts.serverAddress
            let catalog = onBridge ? "http://\(address):80/catalog.json" : nginx.url("catalog.json").absoluteString
            let queue = server.url(host: address, parameters: "?sslmode=disable")
            return [
                "prestage", "--catalog", catalog, "--dest", dest.path, "--queue", queue, "--jobs", "2", "--lease", "3",
                "--json", "--config", dest.appending("courier.json").path, "--storage", dest.appending("storage-\(index)").path,
            ]
        }
        var processes: [Process] = []
        defer { for process in processes where process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        func start(_ index: Int) throws {
            processes.append(
                try hosts.start(index, arguments(index), output: dest.appending("worker\(index).out"), errors: dest.appending("worker\(index).err")))
        }
        /// What worker `index` said: its standard error and its `error` event.
        func stderr(_ index: Int) -> String {
            let text = (try? String(contentsOf: dest.appending("worker\(index).err"), encoding: .utf8)) ?? ""
            let error = events(in: dest.appending("worker\(index).out")).last { $0["event"] as? String == "error" }
            return text + (error.map { "\($0)" } ?? "")
        }
        /// A download id worker `index` holds with bytes of it on disk (mid-transfer), if any.
        func midTransfer(_ index: Int) -> Bool {
            let pid = processes[index].processIdentifier
            // Before the first process migrated the schema there is no table yet.
            guard let claimed = try? server.psql(
                "SELECT download_id FROM prestage_task WHERE state = 'claimed' AND worker LIKE '%-\(pid)-%'")
            else { return false }
            return claimed.split(separator: "\n").contains { id in
                let part = dest.url.appendingPathComponent(".prestage/downloads/\(id).part")
                return ((try? FileManager.default.attributesOfItem(atPath: part.path)[.size] as? Int) ?? 0) > 0
            }
        }

        /// Whether worker `index` has claimed any task (it joined the run).
        func joined(_ index: Int) -> Bool {
            let pid = processes[index].processIdentifier
            return (try? server.psql("SELECT count(*) FROM prestage_task WHERE worker LIKE '%-\(pid)-%'")) ?? "0" != "0"
        }

        let victim: Int
        if killCoordinator {
            try start(0)
            #expect(waitUntil { (try? server.psql("SELECT count(*) FROM prestage_run")) == "1" || !processes[0].isRunning }, "no run was planned")
            try start(1)
            try start(2)
            // Kill the coordinator once the others work on its run too and it is mid-transfer.
            let ready = waitUntil { (midTransfer(0) && joined(1) && joined(2)) || !processes[0].isRunning }
            #expect(ready && processes[0].isRunning, "the coordinator was never mid-transfer beside the others: \(stderr(0))")
            victim = 0
        } else {
            for index in 0..<3 { try start(index) }
            let ready = waitUntil { midTransfer(1) || !processes[1].isRunning }
            #expect(ready && processes[1].isRunning, "worker 1 was never mid-transfer: \(stderr(1))")
            victim = 1
        }
        kill(processes[victim].processIdentifier, SIGKILL)
        processes[victim].waitUntilExit()
        #expect(processes[victim].terminationReason == .uncaughtSignal)
        for index in 0..<3 where index != victim {
            #expect(waitForExit(processes[index]), "worker \(index) did not finish: \(stderr(index))")
            // One package is missing upstream: every surviving worker reports it, exit 1.
            #expect(processes[index].exitStatus == 1, "worker \(index): \(stderr(index))")
            let error = events(in: dest.appending("worker\(index).out")).last { $0["event"] as? String == "error" }
            #expect((error?["message"] as? String)?.contains("com.example.missing") == true, "worker \(index): \(String(describing: error))")
        }
        // Every package staged exactly once (one recorded outcome, one file with the upstream's
        // bytes), the missing one failed, nothing left claimed, the catalog published once.
        let unstaged = try server.psql(
            "SELECT content_identifier || ' ' || state || ' ' || coalesce(worker, '') || ' ' || coalesce(outcome::text, '') FROM prestage_task WHERE state <> 'staged'")
        #expect(
            try server.psql("SELECT string_agg(state || ':' || n, ',' ORDER BY state) FROM (SELECT state, count(*) n FROM prestage_task GROUP BY state) s") == "failed:1,staged:\(names.count)",
            "\(unstaged)")
        #expect(try server.psql("SELECT count(*) || ' ' || string_agg(state, ',') FROM prestage_run") == "1 published")
        try Self.checkStaged(dest, upstream: upstream, expected: names)
        let publications = (0..<3).flatMap { events(in: dest.appending("worker\($0).out")) }
            .filter { $0["event"] as? String == "published" && $0["changed"] as? Bool == true }
        #expect(publications.count == 1, "the catalog was published \(publications.count) times")
        #expect(try server.psql("SELECT count(*) FROM prestage_task WHERE attempts >= 2") != "0", "no task of the killed worker was taken over")
        if killCoordinator {
            let planned = (1..<3).flatMap { events(in: dest.appending("worker\($0).out")) }.filter { $0["event"] as? String == "planned" }
            #expect(planned.isEmpty, "a second coordinator planned the run again")
        }
        if let note = hosts.note { print("note: \(note)") }
    }

    @Test("three workers (three network namespaces, else loopback): kill -9 of one mid-transfer, every package staged once, catalog published once")
    func threeWorkersSurviveAKill() throws {
        try threeWorkers(killCoordinator: false)
    }

    @Test("the coordinator killed with kill -9 mid-run: another process takes its lock, finishes and publishes the run")
    func coordinatorIsReplaced() throws {
        try threeWorkers(killCoordinator: true)
    }
}
