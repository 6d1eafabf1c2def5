import Courier
import CourierTestSupport
import Foundation
import Testing

/// `courier update` end to end (issue 13, "Updates"): real packages on nginx, the built binary.
@Suite("courier update end to end (sandbox receipts, zip packages, nginx)", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct UpdateCommandTests {
    @Test("v1 delivered, the catalog bumps to v2: update installs v2 exactly; a second run has nothing to update")
    func updatesToTheNewVersion() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        let delivered = try shop.deliverV1()
        #expect(delivered.status == 0, "\(delivered.stderr)")
        #expect(shop.tree() == shop.expectedTree("1.0"))

        // Same version in the catalog: nothing to update, said plainly, nothing fetched.
        let current = try shop.courier(["update", "--catalog", shop.catalog("1.0")])
        #expect(current.status == 0, "\(current.stderr)")
        #expect(current.stdout.contains("Nothing to update"), "\(current.stdout)")

        let requestsBefore = shop.nginx.accessLog().count
        let update = try shop.courier(["update", "--catalog", shop.catalog("2.0")])
        #expect(update.status == 0, "\(update.stderr)")
        #expect(shop.tree() == shop.expectedTree("2.0"))
        #expect(update.stdout.contains("updated \(UpdateShop.product) from 1.0 to 2.0 at "), "\(update.stdout)")
        let fetched = shop.nginx.accessLog(atLeast: requestsBefore + 2).dropFirst(requestsBefore)
        #expect(fetched.contains { $0.contains("pack-2.0.zip") && $0.contains("\" 200 ") }, "\(Array(fetched))")

        let content = try shop.courier(["content", "list", "--json"])
        #expect(content.stdout.contains("\"version\":\"2.0\""), "\(content.stdout)")
        let listed = try shop.courier(["list", "--all", "--json"])
        let entry = try #require((listed.events.first?["entries"] as? [[String: Any]])?.first)
        #expect(entry["updateFrom"] as? String == "1.0")
        #expect(entry["contentVersion"] as? String == "2.0")
        #expect(entry["state"] as? String == "finished")
        #expect(entry["transactionState"] as? String == "finished")
        // Nothing is left unfinished, so a plain `list` shows nothing.
        #expect(try shop.courier(["list"]).stdout.contains("No unfinished transactions"))

        let again = try shop.courier(["update", "--catalog", shop.catalog("2.0"), "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        let result = try #require(again.events.last)
        #expect(result["event"] as? String == "result")
        #expect((result["updated"] as? [Any])?.isEmpty == true)
        #expect((result["upToDate"] as? [[String: Any]])?.first?["version"] as? String == "2.0")
    }

    @Test("a refunded purchase is not updated: exit 3, v1 kept, the new package never fetched")
    func refundedPurchaseIsNotUpdated() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        let refund = try shop.receipt(refunded: true, name: "refunded.txt")
        let update = try shop.courier(["update", "--catalog", shop.catalog("2.0"), "--receipt", refund.path] + shop.receiptOptions)
        #expect(update.status == 3, "\(update.stderr)")
        #expect(update.stderr.contains("refunded or revoked"), "\(update.stderr)")
        #expect(shop.tree() == shop.expectedTree("1.0"))
        #expect(!shop.nginx.accessLog().contains { $0.contains("pack-2.0.zip") })
        #expect(try shop.courier(["list"]).stdout.contains("No unfinished transactions"))

        // The refund is recorded in the store: `list` shows it, and an update without the
        // receipt (the agent's) refuses too instead of fetching the new version.
        let listed = try shop.courier(["list", "--all", "--json"])
        let entry = try #require((listed.events.first?["entries"] as? [[String: Any]])?.first, "\(listed.stdout)")
        #expect(entry["revoked"] as? Bool == true, "\(listed.stdout)")
        #expect(entry["transactionState"] as? String == "finished")
        let table = try shop.courier(["list", "--all"])
        #expect(table.stdout.contains("finished (revoked)"), "\(table.stdout)")
        let again = try shop.courier(["update", "--catalog", shop.catalog("2.0")])
        #expect(again.status == 3, "\(again.stderr)")
        #expect(again.stderr.contains("refunded or revoked"), "\(again.stderr)")
        #expect(shop.tree() == shop.expectedTree("1.0"))
        #expect(!shop.nginx.accessLog().contains { $0.contains("pack-2.0.zip") })
    }

    @Test("list --json: a purchase that was not refunded carries no revoked field")
    func unrefundedPurchaseIsNotRevoked() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        let listed = try shop.courier(["list", "--all", "--json"])
        let entry = try #require((listed.events.first?["entries"] as? [[String: Any]])?.first, "\(listed.stdout)")
        #expect(entry["revoked"] == nil, "\(listed.stdout)")
    }

    @Test("a package that fails verification: exit 6, v1 kept; list and status show the failed update; a good catalog then updates")
    func failedUpdateIsListedAndRetried() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        let bad = try shop.courier(["update", "--catalog", shop.catalog("tampered")])
        #expect(bad.status == 6, "\(bad.stderr)")
        #expect(shop.tree() == shop.expectedTree("1.0"))
        // The finished purchase's failed update is listed (not only with --all).
        let table = try shop.courier(["list"])
        #expect(table.stdout.contains("failed (update 1.0 -> 2.0)"), "\(table.stdout)")
        let listed = try shop.courier(["list", "--json"])
        let entry = try #require((listed.events.first?["entries"] as? [[String: Any]])?.first)
        #expect(entry["updateFrom"] as? String == "1.0" && entry["state"] as? String == "failed", "\(entry)")
        let status = try shop.courier(["status", try #require(entry["downloadId"] as? String)])
        #expect(status.stdout.contains("update from 1.0 to 2.0"), "\(status.stdout)")

        let good = try shop.courier(["update", "--catalog", shop.catalog("2.0")])
        #expect(good.status == 0, "\(good.stderr)")
        #expect(shop.tree() == shop.expectedTree("2.0"))
        #expect(try shop.courier(["list"]).stdout.contains("No unfinished transactions"))
    }

    @Test("a catalog that lists an older version: the downgrade is refused, v1 kept, nothing fetched, exit 0")
    func downgradeIsRefused() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        let update = try shop.courier(["update", "--catalog", shop.catalog("0.9")])
        #expect(update.status == 0, "\(update.stderr)")
        #expect(update.stderr.contains("a downgrade is refused"), "\(update.stderr)")
        #expect(update.stdout.contains("Nothing to update"), "\(update.stdout)")
        #expect(shop.tree() == shop.expectedTree("1.0"))
        #expect(!shop.nginx.accessLog().contains { $0.contains("pack-0.9.zip") })
    }

    @Test("update --product names content that is not delivered: said, exit 1; no store: said, exit 1, none created")
    func productNotDelivered() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        let none = try shop.courier(["update", "--catalog", shop.catalog("2.0")])
        #expect(none.status == 1, "\(none.stderr)")
        #expect(none.stderr.contains("no Courier store at"), "\(none.stderr)")
        #expect(!FileManager.default.fileExists(atPath: shop.storage.path))
        #expect(try shop.deliverV1().status == 0)
        let other = try shop.courier(["update", "--catalog", shop.catalog("2.0"), "--product", "com.example.other"])
        #expect(other.status == 1, "\(other.stderr)")
        #expect(other.stderr.contains("not delivered in this store: com.example.other"), "\(other.stderr)")
        // Said once, and no "Nothing to update" beside the error (issue 31, item 6).
        #expect(other.stderr.components(separatedBy: "not delivered in this store").count == 2, "\(other.stderr)")
        #expect(!other.stdout.contains("Nothing to update"), "\(other.stdout)")
        #expect(shop.tree() == shop.expectedTree("1.0"))
    }

    @Test("with manifests, update fetches only the changed entries (ranges of the new package) and installs v2 exactly")
    func updatesByChangedEntries() throws {
        let shop = try UpdateShop(fileSize: 256 << 10, manifests: true)
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        #expect(shop.tree() == shop.expectedTree("1.0"))
        let before = shop.nginx.accessLog().count
        let update = try shop.courier(["update", "--catalog", shop.catalog("2.0")])
        #expect(update.status == 0, "\(update.stderr)")
        #expect(shop.tree() == shop.expectedTree("2.0"))
        let lines = shop.nginx.accessLog(atLeast: before + 2).dropFirst(before).filter { $0.contains("pack-2.0.") }
        #expect(lines.contains { $0.contains("pack-2.0.manifest.json") && $0.contains("\" 200 ") }, "\(lines)")
        let packageLines = lines.filter { $0.contains("pack-2.0.zip") }
        #expect(!packageLines.isEmpty && packageLines.allSatisfy { $0.contains("\" 206 ") }, "\(packageLines)")
        let package = try Data(contentsOf: shop.directory.appending("www").appendingPathComponent("pack-2.0.zip"))
        let served = packageLines.compactMap { line -> Int? in
            guard let range = line.range(of: "\" 206 ") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }.reduce(0, +)
        // b.bin changed (a quarter MiB), d.txt is new; a.bin and the plist come from the installed version.
        #expect(served > 0 && served < package.count * 2 / 3, "served \(served) of \(package.count)")
    }

    @Test(
        "kill -9 of courier update at 20 random moments: the content is exactly v1 or v2, never a mix; the next update finishes",
        arguments: [false, true])
    func killedAtRandomMoments(manifests: Bool) throws {
        // ~0.4 s of transfer per update at 1 MiB/s: the kills land in the download, the unpacking
        // and the swap alike. With manifests, the update goes by changed entries.
        let shop = try UpdateShop(fileSize: 192 << 10, rateLimit: "1m", manifests: manifests)
        defer { shop.stop() }
        #expect(try shop.deliverV1().status == 0)
        let v1 = shop.expectedTree("1.0")
        let v2 = shop.expectedTree("2.0")
        #expect(shop.tree() == v1)
        let pristine = shop.directory.appending("Pristine")
        try FileManager.default.copyItem(at: shop.storage, to: pristine)
        func restore() throws {
            try FileManager.default.removeItem(at: shop.storage)
            try FileManager.default.copyItem(at: pristine, to: shop.storage)
        }
        let arguments = ["update", "--catalog", shop.catalog("2.0")]
        // How long one update takes here, so the kills spread over all of it.
        let started = Date()
        #expect(try shop.courier(arguments).status == 0)
        let duration = Date().timeIntervalSince(started)
        #expect(shop.tree() == v2)

        var generator = SystemRandomNumberGenerator()
        var outcomes: [String: Int] = [:]
        var sawPendingUpdate = false
        for trial in 1...20 {
            try restore()
            let process = try shop.start(arguments)
            usleep(UInt32(Double.random(in: 0...(duration * 1.1), using: &generator) * 1e6))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let tree = shop.tree()
            let version = tree == v1 ? "1.0" : tree == v2 ? "2.0" : "mix"
            outcomes[version, default: 0] += 1
            #expect(version != "mix", "trial \(trial): \(tree.keys.sorted())")
            if version == "1.0" && !sawPendingUpdate {
                // The interrupted update shows in `list`: from 1.0 to 2.0.
                let listed = try shop.courier(["list", "--json"])
                let entries = (listed.events.first?["entries"] as? [[String: Any]]) ?? []
                if let entry = entries.first {
                    sawPendingUpdate = true
                    #expect(entry["updateFrom"] as? String == "1.0" && entry["contentVersion"] as? String == "2.0", "\(entry)")
                }
            }
            let next = try shop.courier(arguments)
            #expect(next.status == 0, "trial \(trial): \(next.stderr)")
            #expect(shop.tree() == v2, "trial \(trial)")
        }
        #expect(outcomes["mix"] == nil, "\(outcomes)")
    }
}
