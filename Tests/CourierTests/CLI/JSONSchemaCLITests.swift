import CourierTestSupport
import Foundation
import Testing

/// The --json vocabulary of docs/json.md (issue 14, item 10): every line of standard output is
/// one JSON object; every event names itself in `event` and says when in `time` (RFC 3339, UTC);
/// the result or error comes last; each event kind has its documented fields.
@Suite("--json output against docs/json.md (the built courier binary)")
struct JSONSchemaCLITests {
    /// The fields each event must have (docs/json.md, "Events").
    static let required: [String: Set<String>] = [
        "result": [], "error": ["code", "message", "exitCode"], "retry": ["retry", "maxRetries", "delay", "code", "message"],
        "saved": ["file", "length", "sha256"], "refused": ["url", "code", "message"], "mirror": ["from", "to", "code", "message"],
        "progress": ["bytesReceived", "rate"], "waitingForOwner": ["owners", "downloads"],
        "download": ["downloadId", "transactionId", "state", "bytesReceived", "contentLength", "rate"], "status": ["entries"],
        "update": ["downloadId", "contentIdentifier", "fromVersion", "toVersion", "contentLength", "url"],
        "wholePackage": ["downloadId", "contentIdentifier", "contentLength", "reason"],
    ]
    /// Every field docs/json.md documents for each event (of any command).
    static let documented: [String: Set<String>] = {
        var fields: [String: Set<String>] = [:]
        for row in (try? JSONSchemaDoc.rows()) ?? [] { fields[row.event, default: []].formUnion(row.fields) }
        return fields
    }()
    /// Names of the same things that one vocabulary replaced (docs/json.md): never printed.
    static let retired: Set<String> = ["bytesPerSecond", "totalBytes", "contentURL", "delivered", "id"]

    private func check(_ result: CourierBinary.Result, _ what: String) {
        let lines = result.stdout.split(separator: "\n")
        #expect(!lines.isEmpty, "\(what): no output")
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for (index, line) in lines.enumerated() {
            guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
                Issue.record("\(what): not a JSON object: \(line)")
                continue
            }
            guard let event = object["event"] as? String else {
                Issue.record("\(what): no event: \(line)")
                continue
            }
            let time = object["time"] as? String
            #expect(time.flatMap(formatter.date(from:)) != nil, "\(what): no RFC 3339 time: \(line)")
            if let fields = Self.documented[event] {
                let printed = JSONSchemaDoc.paths(object)
                #expect(printed.isSubset(of: fields), "\(what): \(event) prints undocumented \(printed.subtracting(fields).sorted())")
            } else {
                Issue.record("\(what): \(event) is not in docs/json.md")
            }
            if let fields = Self.required[event] {
                #expect(fields.isSubset(of: Set(object.keys)), "\(what): \(event) lacks \(fields.subtracting(object.keys))")
            }
            #expect(Self.retired.isDisjoint(with: object.keys), "\(what): a retired name in \(line)")
            if event == "result" || event == "error" {
                #expect(index == lines.count - 1, "\(what): \(event) is not last")
            }
        }
    }

    @Test("get: result, retries and errors; get -i: per-file events")
    func getEvents() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let text = Data("json schema\n".utf8)
        let good = try FaultOrigin(content: text, behavior: .init())
        defer { good.stop() }
        var failing = FaultOrigin.Behavior()
        failing.status = 503
        failing.faultyResponses = 1000
        let bad = try FaultOrigin(content: text, behavior: failing)
        defer { bad.stop() }
        let config = try TransferFixture.writeConfigFile(in: folder)
        check(try CourierBinary.run(["get", good.url().absoluteString, "-o", folder.appending("a").path, "--json", "--config", config.path]), "get")
        check(try CourierBinary.run(["get", bad.url().absoluteString, "-o", folder.appending("b").path, "--json", "--config", config.path]), "get 503")
        try Data((good.url("/c.bin").absoluteString + "\nnot a url\n").utf8).write(to: folder.appending("list"))
        check(
            try CourierBinary.run([
                "get", "-i", folder.appending("list").path, "-d", folder.appending("out").path, "--json", "--config", config.path,
            ]), "get -i")
        try Data((good.url("/d.bin").absoluteString + "\n").utf8).write(to: folder.appending("list2"))
        check(
            try CourierBinary.run([
                "get", "-i", folder.appending("list2").path, "-d", folder.appending("out").path, "--json", "--config", config.path,
            ]), "get -i, all saved")
        check(try CourierBinary.run(["list", "--json", "--storage", folder.appending("nowhere").path]), "list error")
    }

    @Test(
        "update: update and download events, then the result; nothing to update is a result too",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func updateEvents() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        let run = try shop.courier(["update", "--catalog", shop.catalog("2.0"), "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        check(run, "update")
        #expect(run.events.contains { $0["event"] as? String == "update" && $0["toVersion"] as? String == "2.0" })
        #expect(run.events.contains { $0["event"] as? String == "download" && $0["fromVersion"] as? String == "1.0" && $0["contentPath"] is String })
        let result = try #require(run.events.last)
        let updated = try #require((result["updated"] as? [[String: Any]])?.first)
        #expect(updated["fromVersion"] as? String == "1.0" && updated["toVersion"] as? String == "2.0" && updated["contentPath"] is String)
        let again = try shop.courier(["update", "--catalog", shop.catalog("2.0"), "--json"])
        check(again, "update, nothing to update")
        #expect(Set(try #require(again.events.last).keys) == Set(result.keys))
    }

    @Test(
        "deliver: a re-run's result has a first run's fields; download events and list say contentPath; status --watch is NDJSON",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func deliverAndStatus() throws {
        // About a second per package, so status --watch sees downloads move.
        let shop = try Shop(payloadSize: 256 << 10, rateLimit: "256k")
        defer { shop.stop() }
        let receipt = try shop.receipt(Shop.products)
        _ = try shop.courier(["list", "--json"])  // writes the configuration file
        let delivering = try shop.start(shop.deliverArguments(receipt))
        var downloadId: String?
        let deadline = Date().addingTimeInterval(30)
        while downloadId == nil && Date() < deadline && delivering.isRunning {
            let listed = try shop.courier(["list", "--json"])
            downloadId = ((listed.events.first?["entries"] as? [[String: Any]]) ?? []).compactMap { $0["downloadId"] as? String }.first
            if downloadId == nil { usleep(50_000) }
        }
        if let downloadId {
            let watched = try shop.courier(["status", downloadId, "--watch", "--json", "--interval", "0.1"])
            #expect(watched.status == 0, "\(watched.stderr)")
            check(watched, "status --watch")
            #expect(watched.events.last?["event"] as? String == "result")
            // No snapshot repeats the one before it: each differs in what a reader sees (state,
            // pause, bytes, error, owner, stall, source), not only in timestamps or rates.
            let snapshots = watched.events.filter { $0["event"] as? String == "status" }.map { event in
                ((event["entries"] as? [[String: Any]]) ?? []).map { entry in
                    let owner = entry["owner"] as? [String: Any]
                    let error = entry["error"] as? [String: Any]
                    return [
                        entry["transactionState"], entry["state"], entry["pauseReason"], entry["bytesReceived"],
                        error?["code"], owner?["pid"], owner?["host"], entry["stalled"], entry["source"],
                    ].map { "\($0 ?? "-")" }.joined(separator: " ")
                }
            }
            for (before, after) in zip(snapshots, snapshots.dropFirst()) { #expect(before != after, "a repeated snapshot: \(after)") }
        }
        delivering.waitUntilExit()
        #expect(delivering.exitStatus == 0)

        let first = try shop.courier(["list", "--all", "--json"])
        let entries = (first.events.first?["entries"] as? [[String: Any]]) ?? []
        #expect(entries.count == 3 && entries.allSatisfy { $0["contentPath"] is String && $0["contentURL"] == nil }, "\(entries)")
        let again = try shop.courier(shop.deliverArguments(receipt) + ["--json"])
        check(again, "deliver re-run")
        let rerun = try #require(again.events.last)
        #expect((rerun["alreadyDelivered"] as? [String])?.count == 3)
        #expect((rerun["content"] as? [String])?.count == 3)

        // A first run on a fresh store: the same fields, download events with contentPath.
        let fresh = shop.directory.appending("Fresh")
        let run = try shop.courier(shop.deliverArguments(receipt) + ["--json"], storage: fresh)
        check(run, "deliver")
        let result = try #require(run.events.last)
        #expect(Set(result.keys) == Set(rerun.keys), "first run \(result.keys.sorted()), re-run \(rerun.keys.sorted())")
        #expect(run.events.contains { $0["event"] as? String == "download" && $0["contentPath"] is String })
        // Each transaction state is said once (a finished transaction is updated and removed).
        let said = run.events.filter { $0["event"] as? String == "transaction" }.map { "\($0["transactionId"] ?? "") \($0["state"] ?? "")" }
        #expect(said.count == Set(said).count, "a transaction event repeats: \(said)")
        #expect(said.filter { $0.hasSuffix(" finished") }.count == Shop.products.count, "\(said)")
    }

    @Test(
        "enqueue, pause, resume and cancel end with a result line (or an error)",
        .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
    func queueCommandsEndWithResult() throws {
        let shop = try Shop()
        defer { shop.stop() }
        let receipt = try shop.receipt([Shop.products[0]])
        var enqueue = shop.deliverArguments(receipt)
        enqueue[0] = "enqueue"
        let queued = try shop.courier(enqueue + ["--json"])
        #expect(queued.status == 0, "\(queued.stderr)")
        check(queued, "enqueue")
        let result = try #require(queued.events.last)
        #expect(result["event"] as? String == "result" && result["agent"] as? Bool == false)
        let downloads = ((result["transactions"] as? [[String: Any]])?.first?["downloads"] as? [[String: Any]]) ?? []
        let id = try #require(downloads.first?["downloadId"] as? String)
        for arguments in [["pause", id], ["resume", id], ["cancel", id], ["pause", "--all"]] {
            let run = try shop.courier(arguments + ["--json"])
            check(run, arguments.joined(separator: " "))
            let last = try #require(run.events.last)
            #expect(last["event"] as? String == "result" || last["event"] as? String == "error", "\(arguments): \(last)")
            // resume without an agent delivers what it resumed: its result is deliver's.
            let resumed = arguments[0] == "resume"
            if run.status == 0 { #expect(last[resumed ? "finishedDownloads" : "downloads"] is [Any], "\(arguments): \(last)") }
            if resumed { #expect(run.events.contains { $0["event"] as? String == "resumed" }) }
        }
    }

    @Test("sandbox, receipt, origin, content, prestage, status and update: every line documented, the last a result or an error")
    func otherCommands() throws {
        let folder = try TemporaryDirectory()
        defer { folder.remove() }
        let sandbox = folder.appending("Sandbox").path
        let storage = ["--storage", folder.appending("Storage").path]
        func run(_ arguments: [String]) throws -> CourierBinary.Result {
            try CourierBinary.run(arguments + ["--json"] + storage, environment: CourierBinary.isolatedEnvironment(folder))
        }
        let initialized = try run(["sandbox", "init", "--dir", sandbox])
        #expect(initialized.status == 0, "\(initialized.stderr)")
        check(initialized, "sandbox init")
        let purchase = try run(["sandbox", "purchase", "com.example.levels.pack1", "--dir", sandbox])
        check(purchase, "sandbox purchase")
        let token = try #require(purchase.events.last?["signedTransaction"] as? String)
        let receipt = folder.appending("purchase.jws")
        try Data((token + "\n").utf8).write(to: receipt)
        let root = sandbox + "/root.pem"
        let verified = try run(["receipt", "verify", receipt.path, "--trust-root", root, "--environment", "Sandbox"])
        #expect(verified.status == 0, "\(verified.stderr)")
        check(verified, "receipt verify")
        #expect((verified.events.last?["transactions"] as? [Any])?.count == 1)
        check(try run(["receipt", "verify", receipt.path, "--trust-root", root]), "receipt verify, refused")
        check(
            try run(["receipt", "entitlements", receipt.path, "--catalog", sandbox + "/catalog.json", "--trust-root", root, "--environment", "Sandbox"]),
            "receipt entitlements")
        let nginx = try run(["origin", "nginx-config", "--content", sandbox, "--gate", "127.0.0.1:8081", "--listen", "127.0.0.1:8080"])
        #expect(nginx.status == 0, "\(nginx.stderr)")
        check(nginx, "origin nginx-config")
        check(try run(["content", "delete", "com.example.nothing"]), "content delete")
        check(try run(["content", "verify"]), "content verify")
        check(try run(["prestage", "--catalog", folder.appending("none.json").path, "--dest", folder.appending("stage").path]), "prestage")
        check(try run(["status", "nosuch", "--watch"]), "status --watch")
        check(try run(["update"]), "update")
        check(try run(["enqueue", "--receipt", folder.appending("none.jws").path]), "enqueue")
    }
}
