import Foundation

import Courier
import CourierPostgres
import CourierServer

/// The parsers of untrusted bytes, one fuzz target each (issue 10, "Fuzz every parser").
///
/// `scripts/fuzz` links this module into a libFuzzer driver (`Tests/Fuzz/Driver/main.swift`)
/// built with `-sanitize=fuzzer,address`; the test suite replays every committed input under
/// `Tests/Fuzz/Regressions/TARGET/` through the same entry points, so CI runs the inputs the
/// fuzzers found, not the fuzzers. A target may throw (that is a refusal, the expected answer to
/// garbage); it must never trap, hang or read out of bounds.
public enum FuzzTargets {
    /// The target names, as `scripts/fuzz TARGET` and the regression folders spell them.
    public static let names: [String] = [
        "zip", "jws", "verify-receipt", "range", "agent", "catalog", "content-info", "journal",
        "notification", "response-head", "request-path", "manifest", "multipart", "postgres-url", "authorize",
        "prestage-plan", "tuf-metadata", "rate", "legacy-receipt", "terminal-keys",
    ]

    /// Feeds `data` to the parser `name`; returns false for an unknown name.
    @discardableResult
    public static func run(_ name: String, _ data: Data) -> Bool {
        switch name {
        case "zip": zip(data)
        case "jws": jws(data)
        case "verify-receipt": verifyReceipt(data)
        case "range": range(data)
        case "agent": agent(data)
        case "catalog": catalog(data)
        case "content-info": contentInfo(data)
        case "journal": journal(data)
        case "notification": notification(data)
        case "response-head": responseHead(data)
        case "request-path": requestPath(data)
        case "manifest": manifest(data)
        case "multipart": multipart(data)
        case "postgres-url": postgresURL(data)
        case "authorize": authorize(data)
        case "prestage-plan": prestagePlan(data)
        case "tuf-metadata": tufMetadata(data)
        case "rate": rate(data)
        case "legacy-receipt": legacyReceipt(data)
        case "terminal-keys": terminalKeys(data)
        default: return false
        }
        return true
    }

    /// A compact JWS and the transaction payload inside it, up to the `format` checks (shape,
    /// ES256, an `x5c` array, the payload's fields); the chain and signature checks run on
    /// swift-certificates' and swift-crypto's parsers.
    static func jws(_ data: Data) {
        guard let decoded = try? SignedTransactionVerifier.decodeUnverified(data) else { return }
        _ = decoded.jws.certificateChain
        _ = try? decoded.payload.json()
    }

    /// A verifyReceipt answer, as if each endpoint had sent it.
    static func verifyReceipt(_ data: Data) {
        guard let response = VerifyReceiptResponse(body: data) else { return }
        for endpoint in [VerifyReceiptResponse.Endpoint.production, .sandbox] {
            _ = response.environment(answeredBy: endpoint)
            _ = try? response.transactions(
                answeredBy: endpoint, bundleId: "com.example.app", environments: ["Production", "Sandbox"])
        }
    }

    /// A `Range` header against a few representation lengths and one the input chooses (its
    /// first 8 bytes); every partial answer must lie inside the representation.
    static func range(_ data: Data) {
        let bytes = [UInt8](data)
        func check(_ request: ByteRangeRequest, _ length: Int64) {
            if case .partial(let bounds) = request {
                precondition(bounds.lowerBound >= 0 && bounds.upperBound < length, "range outside the representation")
            }
        }
        for length: Int64 in [0, 1, 1000, Int64.max] {
            check(ByteRangeRequest(headerBytes: bytes, length: length), length)
        }
        var chosen: Int64 = 0
        for (index, byte) in bytes.prefix(8).enumerated() { chosen |= Int64(byte) << (8 * Int64(index)) }
        check(ByteRangeRequest.parse(fuzzInput: bytes), chosen)
    }

    /// A resume journal file, as `courier get` and the queue load it (validated: no control
    /// characters in validators, offsets within bounds, an http(s) URL).
    static func journal(_ data: Data) {
        guard let journal = try? ResumeJournal.decodeJournalFile(data) else { return }
        precondition(journal.durableOffset >= 0, "a loaded journal has a negative offset")
        if let total = journal.totalLength { precondition(journal.durableOffset <= total, "offset past the total") }
    }

    /// A download's response head as libcurl hands it over line by line (status line, fields),
    /// then the decision taken on it for a request from 0 and for a resumed one: a partial answer
    /// may only be accepted where it continues the bytes asked for.
    static func responseHead(_ data: Data) {
        let text = String(decoding: data, as: UTF8.self)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard !lines.isEmpty, let status = HTTPHeaderLine.status(lines.removeFirst()) else { return }
        var head = DownloadResponseHead(status: status)
        for line in lines {
            guard let (name, value) = HTTPHeaderLine.field(line) else { continue }
            head.record(name: name.lowercased(), value: value)
        }
        let url = URL(string: "https://cdn.example.com/p.zip")!
        for (offset, total) in [(Int64(0), Int64?.none), (1000, 5000), (Int64(1) << 62, nil)] {
            _ = ResponseDecision.decide(head, requestedOffset: offset, knownTotal: total, url: url)
        }
    }

    /// A `POST /notifications` body (App Store Server Notifications V2), decoded but not verified.
    static func notification(_ data: Data) {
        _ = try? ServerNotification.decode(body: data)
    }

    /// The origin's reading of a request target (the path the gate and the catalog index are
    /// asked about): query dropped, percent-decoded, dot segments resolved.
    static func requestPath(_ data: Data) {
        _ = PublishedCatalog.requestPath(String(decoding: data, as: UTF8.self))
    }

    /// What `/authorize` reads from nginx: `X-Original-URI` (the first line) and the
    /// `Authorization` value (the rest). A canonical path must come back unchanged by the
    /// origin's own reading of it; a bearer token is a trimmed piece of the value.
    static func authorize(_ data: Data) {
        let text = String(decoding: data, as: UTF8.self)
        let parts = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        let target = parts.first.map(String.init) ?? ""
        if let path = RequestTarget.canonicalPath(target) {
            precondition(PublishedCatalog.requestPath(path) == path && !path.contains("//") && !path.contains("%"))
        }
        let value = parts.count > 1 ? String(parts[1]) : ""
        if let token = RequestTarget.bearer(value) {
            precondition(!token.isEmpty && value.contains(token) && token.first != " " && token.last != " ")
        }
    }

    /// A rate in curl's syntax (`--limit-rate`, `transfer.maxRate`), then the same bytes as a
    /// `transfer.rateSchedule` document: an accepted rate is positive, within the maximum and
    /// written back to the same rate; an accepted window has its minutes inside the day.
    /// The PKCS#7 shape check a base64 legacy receipt passes before it is sent to Apple.
    static func legacyReceipt(_ data: Data) {
        _ = LegacyReceiptShape.problem([UInt8](data))
        if let text = String(data: data, encoding: .utf8), let decoded = Data(base64Encoded: text) {
            _ = LegacyReceiptShape.problem([UInt8](decoded))
        }
    }

    static func rate(_ data: Data) {
        let text = String(decoding: data, as: UTF8.self)
        if let rate = try? ByteRate(parsing: text) {
            precondition(rate.bytesPerSecond >= 1 && rate.bytesPerSecond <= ByteRate.maximum)
            precondition((try? ByteRate(parsing: rate.description)) == rate)
        }
        if let minute = RateScheduleWindow.minuteOfDay(text) { precondition((0...1440).contains(minute)) }
        if let configuration = try? CourierConfiguration.decode(Data("{\"transfer\": {\"rateSchedule\": \(text)}}".utf8)) {
            for window in configuration.transfer.rateSchedule {
                precondition((0...1440).contains(window.from) && (0...1440).contains(window.to) && window.from != window.to)
            }
        }
    }

    /// The keys `courier top` reads from its terminal: every key takes at least one byte, and
    /// printable bytes with no escape among them are one key each.
    static func terminalKeys(_ data: Data) {
        let bytes = Array(data)
        let keys = TerminalKey.parse(bytes)
        precondition(keys.count <= bytes.count)
        if bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { precondition(keys.count == bytes.count) }
    }

    /// One line of the agent's control protocol, as the agent decodes it from a client.
    static func agent(_ data: Data) {
        _ = try? AgentWire.decode(AgentRequest.self, from: data)
    }

    /// A whole package file: the zip's end records, central directory and local headers, then
    /// the package rules `inspect` applies before anything is unpacked, then, for what passes
    /// them, the prestage check's pass over the entries through libarchive from memory, hashing
    /// each entry and checking its CRC-32 itself (`PackageInspector.preflight(hashingEntries:)`).
    static func zip(_ data: Data) {
        let bytes = [UInt8](data)
        guard let directory = try? ZipDirectory.parse(bytes), (try? directory.check(PackageConfiguration())) != nil else { return }
        _ = try? PackageInspector.preflight(
            URL(fileURLWithPath: "/nonexistent/fuzz.zip"), bytes: bytes, limits: PackageConfiguration(), hashingEntries: true)
    }

    /// TUF metadata as the client reads it: the strict JSON parser, canonical JSON of `signed`,
    /// each role's fields, signature checks with the keys the document itself lists, and the
    /// delegations' path matching.
    static func tufMetadata(_ data: Data) {
        if let value = try? JSONParser.parse(data) { _ = try? CanonicalJSON.encode(value) }
        if let root = try? TUFRoot(data) { _ = try? root.verify(role: "root", root.envelope) }
        _ = try? TUFTimestamp(data)
        _ = try? TUFSnapshot(data)
        if let targets = try? TUFTargets(data) {
            for role in targets.delegatedRoles {
                _ = role.covers("app/catalog.json")
                _ = try? targets.verify(role: role.name, targets.envelope)
            }
        }
    }

    /// A catalog document.
    static func catalog(_ data: Data) {
        guard let catalog = try? Catalog.decode(data) else { return }
        for product in catalog.products {
            if let content = product.content {
                _ = Catalog.resolve(content.url, relativeTo: URL(string: "https://cdn.example.com/catalog.json"))
            }
        }
    }

    /// A PostgreSQL URL (`--queue`, `--state`, `prestage.queue`); whatever it accepts has a
    /// database and a port in range, and its description never shows the password.
    static func postgresURL(_ data: Data) {
        let text = String(decoding: data, as: UTF8.self)
        _ = PostgresURL.redacted(text)
        guard let url = try? PostgresURL(parsing: text) else { return }
        precondition((1...65535).contains(url.port) && !url.database.isEmpty && !url.user.isEmpty)
        if let password = url.password, !password.isEmpty, password.count > 3 {
            precondition(!url.description.contains(":\(password)@"))
        }
    }

    /// A package's manifest (`PackageManifest.decode`), then a delta plan made from it: what
    /// decodes has every file's range inside the package and none overlapping.
    static func manifest(_ data: Data) {
        PackageManifest.fuzz(data)
    }

    /// A `multipart/byteranges` answer to a range request: the first line is the Content-Type,
    /// the rest the body; what is handed over lies inside the representation.
    static func multipart(_ data: Data) {
        MultipartByteRangesParser.fuzz(data)
    }

    /// A pre-staging plan as a process reads it back from a PostgreSQL row (`PrestagePlan.decode`):
    /// what decodes has every task checked (a folder name, its own digest's path), and the
    /// catalog made from it lists every task it stages.
    static func prestagePlan(_ data: Data) {
        guard let plan = try? PrestagePlan.decode(data) else { return }
        for task in plan.tasks { precondition((try? task.check()) != nil, "a decoded plan holds an unchecked task") }
        let staged = Set(plan.tasks.map(\.contentIdentifier))
        let listed = Set(plan.catalog(staged: staged).allContent.map(\.contentIdentifier))
        precondition(staged.isSubset(of: listed), "the catalog of a decoded plan leaves a staged task out")
        _ = PrestageJob.plannedEvent(plan)
    }

    /// A package's ContentInfo.plist.
    static func contentInfo(_ data: Data) {
        _ = try? ContentInfo.parse(data)
    }
}

/// The fuzz target named by `COURIER_FUZZ_TARGET`, read once.
private let environmentTarget: String? = {
    guard let name = ProcessInfo.processInfo.environment["COURIER_FUZZ_TARGET"], FuzzTargets.names.contains(name) else {
        return nil
    }
    return name
}()

/// One libFuzzer input for the target `COURIER_FUZZ_TARGET` names (the driver's only call).
@_cdecl("courier_fuzz_one")
public func courierFuzzOne(_ bytes: UnsafePointer<UInt8>?, _ count: Int) -> Int32 {
    guard let target = environmentTarget else {
        fatalError("set COURIER_FUZZ_TARGET to one of \(FuzzTargets.names.joined(separator: ", "))")
    }
    let data = bytes.map { Data(bytes: $0, count: count) } ?? Data()
    FuzzTargets.run(target, data)
    return 0
}
