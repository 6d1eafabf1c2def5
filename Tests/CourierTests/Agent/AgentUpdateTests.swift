import Courier
import CourierTestSupport
import Foundation
import Testing

/// The agent updates on its own (issue 13, "Updates"): when the catalog it revalidates lists a
/// newer version of delivered content, it queues the update and installs it (`queue.autoUpdate`).
@Suite("courier agent: automatic updates on a catalog change", .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct AgentUpdateTests {
    @Test("v1 delivered; the agent's catalog changes to v2; the agent installs v2 and list shows the finished update")
    func updatesWhenTheCatalogChanges() throws {
        let shop = try UpdateShop()
        defer { shop.stop() }
        let config = #"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4, "catalogCheckInterval": 0.2}}"#
        try Data(config.utf8).write(to: shop.configFile)
        let www = shop.directory.appending("www")
        let catalog = www.appendingPathComponent("catalog.json")
        try FileManager.default.copyItem(at: www.appendingPathComponent("catalog-1.0.json"), to: catalog)
        #expect(try shop.deliverV1().status == 0)
        #expect(shop.tree() == shop.expectedTree("1.0"))

        let log = shop.directory.appending("agent.log")
        let agent = try CourierBinary.start(
            [
                "agent", "--storage", shop.storage.path, "--catalog", shop.nginx.url("catalog.json").absoluteString,
                "--log-level", "debug", "--check-interval", "0.2",
            ] + shop.receiptOptions,
            environment: shop.environment, directory: shop.directory.url, stderr: log)
        defer { _ = stopProcess(agent) }
        let layout = StorageLayout(root: shop.storage)
        #expect(waitUntil(60) { AgentClient.connect(layout: layout, timeout: 10) != nil || !agent.isRunning })
        // The agent revalidated the catalog at start and found nothing newer.
        #expect(waitUntil(30) { shop.nginx.accessLog().contains { $0.contains("catalog.json") } })
        #expect(shop.tree() == shop.expectedTree("1.0"))

        // A new catalog is published (atomically, as prestage does).
        let next = www.appendingPathComponent("catalog.next")
        try FileManager.default.copyItem(at: www.appendingPathComponent("catalog-2.0.json"), to: next)
        // nginx's ETag is the file's mtime in whole seconds and its length; both catalogs have the
        // same length, so a v2 written in the same second as v1 would revalidate as unchanged (304).
        // A publisher's new catalog is written later than the one it replaces: say so explicitly.
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(10)], ofItemAtPath: next.path)
        #expect(rename(next.path, catalog.path) == 0)
        let updated = waitUntil(60) { shop.tree() == shop.expectedTree("2.0") }
        #expect(updated, "\((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        let listed = try shop.courier(["list", "--all", "--json"])
        let entry = try #require((listed.events.first?["entries"] as? [[String: Any]])?.first)
        #expect(waitUntil(30) {
            let entries = (try? shop.courier(["list", "--all", "--json"]).events.first?["entries"] as? [[String: Any]]) ?? nil
            return entries?.first?["state"] as? String == "finished"
        })
        #expect(entry["updateFrom"] as? String == "1.0", "\(entry)")
        #expect(agent.isRunning)
    }
}
