import Courier
import CourierTestSupport
import Foundation
import Testing

/// Mounts a tmpfs of `size` at `mountPoint`; nil (with the reason printed) when this process
/// cannot (mounting needs root).
private func mountTmpfs(_ mountPoint: URL, size: String, test: String) throws -> Bool {
    guard getuid() == 0 else {
        print("\(test) skipped: mounting a tmpfs needs root")
        return false
    }
    try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
    let mounted = try Shell.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", mountPoint.path])
    guard mounted.status == 0 else {
        print("\(test) skipped: cannot mount a tmpfs here (\(mounted.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))")
        return false
    }
    return true
}

private func unmount(_ mountPoint: URL) {
    if (try? Shell.run("/bin/umount", [mountPoint.path]))?.status != 0 {
        _ = try? Shell.run("/bin/umount", ["-l", mountPoint.path])
    }
}

/// Writes `shop`'s configuration with a 1 MiB disk reserve (the default 64 MiB would not fit
/// the small volumes these tests mount); `Shop` keeps a configuration file it finds.
private func smallReserve(_ shop: Shop) throws {
    let text = """
        {"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}, "transfer": {"maxRetries": 2, "initialBackoff": 0.1, "diskReserve": 1048576}}
        """
    try Data(text.utf8).write(to: shop.directory.appending("courier.json"))
}

/// The one `courier list --all --json` entry of `shop`'s storage.
private func onlyEntry(_ shop: Shop) throws -> [String: Any] {
    let entries = try #require(try shop.courier(["list", "--all", "--json"]).events.first?["entries"] as? [[String: Any]])
    #expect(entries.count == 1, "\(entries)")
    return try #require(entries.first)
}

@Suite(
    "courier deliver with the disk full: paused for insufficientSpace, then resume --stalled",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct DeliverDiskFullTests {
    @Test("Storage on a tmpfs too small for the package: paused (exit 4), remounted larger, resume --stalled delivers once")
    func storageTooSmall() throws {
        let shop = try Shop(payloadSize: 3 << 20)
        defer { shop.stop() }
        try smallReserve(shop)
        guard try mountTmpfs(shop.storage, size: "2m", test: "storageTooSmall") else { return }
        defer { unmount(shop.storage) }
        let product = Shop.products[0]
        let receipt = try shop.receipt([product])

        let full = try shop.courier(shop.deliverArguments(receipt) + ["--json"])
        #expect(full.status == 4, "\(full.stderr)")
        let paused = try onlyEntry(shop)
        #expect(paused["state"] as? String == "paused")
        #expect((paused["error"] as? [String: Any])?["code"] as? String == "insufficientSpace", "\(paused)")
        #expect(paused["stalled"] as? String == "insufficientSpace")
        #expect(!shop.isPlaced(product))

        let grown = try Shell.run("/bin/mount", ["-o", "remount,size=32m", shop.storage.path])
        #expect(grown.status == 0, "\(grown.stderr)")
        let resumed = try shop.courier(["resume", "--stalled"])
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(shop.isPlaced(product))
        let done = try onlyEntry(shop)
        #expect(done["transactionState"] as? String == "finished")
        #expect(done["state"] as? String == "finished")
        let again = try shop.courier(shop.deliverArguments(receipt))
        #expect(again.status == 0)
        #expect(again.stdout.contains("already delivered"), "\(again.stdout)")
    }

    @Test("no unpackedLength in the catalog: room for placement.unpackedSizeFactor x the package is kept before any byte")
    func unpackedEstimateBeforeTheFirstByte() throws {
        // A 3 MiB package (stored), 1 MiB reserve, a 9 MiB volume: the download alone fits, the
        // default estimate (3 + 2 x 3 + 1 = 10 MiB) does not; with a factor of 1 (7 MiB) it does.
        let shop = try Shop(payloadSize: 3 << 20)
        defer { shop.stop() }
        try smallReserve(shop)
        guard try mountTmpfs(shop.storage, size: "9m", test: "unpackedEstimateBeforeTheFirstByte") else { return }
        defer { unmount(shop.storage) }
        let product = Shop.products[0]
        let receipt = try shop.receipt([product])

        let refused = try shop.courier(shop.deliverArguments(receipt) + ["--json"])
        #expect(refused.status == 4, "\(refused.stderr)")
        let paused = try onlyEntry(shop)
        #expect((paused["error"] as? [String: Any])?["code"] as? String == "insufficientSpace", "\(paused)")
        #expect(paused["bytesReceived"] as? Int ?? 0 == 0, "\(paused)")
        #expect(!shop.nginx.accessLog().contains { $0.contains(".zip") })
        #expect(!shop.isPlaced(product))

        try Data("""
            {"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}, "transfer": {"maxRetries": 2, "initialBackoff": 0.1, "diskReserve": 1048576},
             "placement": {"unpackedSizeFactor": 1}}
            """.utf8).write(to: shop.directory.appending("courier.json"))
        let resumed = try shop.courier(["resume", "--stalled"])
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(shop.isPlaced(product))
    }

    @Test("the disk fills mid-download: paused with the partial kept (exit 4), filler deleted, resume --stalled delivers once")
    func fillsMidDownload() throws {
        let shop = try Shop(payloadSize: 4 << 20, rateLimit: "1m")
        defer { shop.stop() }
        try smallReserve(shop)
        // Downloads gets its own small volume so the state database (on the parent volume) can
        // still record the pause when the partial file's volume is full.
        let downloads = shop.storage.appendingPathComponent("Downloads")
        guard try mountTmpfs(downloads, size: "16m", test: "fillsMidDownload") else { return }
        defer { unmount(downloads) }
        let product = Shop.products[0]
        let receipt = try shop.receipt([product])
        // Through `courier` first so the configuration file exists before the process starts.
        _ = try shop.courier(["list", "--json"])
        let output = shop.directory.appending("deliver.out")
        let process = try CourierBinary.start(
            shop.deliverArguments(receipt) + ["--storage", shop.storage.path],
            environment: ["COURIER_CONFIG": shop.directory.appending("courier.json").path], directory: shop.directory.url,
            stdout: output, stderr: shop.directory.appending("deliver.err"))
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
        let deadline = Date().addingTimeInterval(60)
        var receiving = false
        while Date() < deadline && !receiving && process.isRunning {
            usleep(100_000)
            let entries = try shop.courier(["list", "--json"]).events.first?["entries"] as? [[String: Any]] ?? []
            receiving = entries.contains { ($0["bytesReceived"] as? Int ?? 0) > 256 * 1024 }
        }
        try #require(receiving, "the download never started")
        // Fill the volume: dd stops at ENOSPC.
        let filler = downloads.appendingPathComponent("filler")
        _ = try Shell.run("/bin/dd", ["if=/dev/zero", "of=\(filler.path)", "bs=64k"])
        process.waitUntilExit()
        #expect(process.exitStatus == 4, "\((try? String(contentsOf: shop.directory.appending("deliver.err"), encoding: .utf8)) ?? "")")
        let paused = try onlyEntry(shop)
        #expect(paused["state"] as? String == "paused", "\(paused)")
        #expect((paused["error"] as? [String: Any])?["code"] as? String == "insufficientSpace", "\(paused)")
        #expect(paused["stalled"] as? String == "insufficientSpace")
        let kept = paused["bytesReceived"] as? Int ?? 0
        #expect(kept > 0)

        try FileManager.default.removeItem(at: filler)
        let resumed = try shop.courier(["resume", "--stalled"])
        #expect(resumed.status == 0, "\(resumed.stdout)\(resumed.stderr)")
        #expect(shop.isPlaced(product))
        let done = try onlyEntry(shop)
        #expect(done["transactionState"] as? String == "finished")
        // The resume asked nginx for the rest only (a 206), not the whole package again.
        #expect(shop.nginx.accessLog().contains { $0.contains(".zip") && $0.contains("\" 206 ") })
        let again = try shop.courier(shop.deliverArguments(receipt))
        #expect(again.status == 0)
        #expect(again.stdout.contains("already delivered"), "\(again.stdout)")
    }
}
