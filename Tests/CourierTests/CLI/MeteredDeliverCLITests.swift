import Courier
import CourierTestSupport
import Foundation
import Testing

/// `courier deliver` on a metered connection (docs/transfer.md, "Metered networks"): NetworkManager
/// from python3-dbusmock on a real private dbus-daemon, the sandbox shop on nginx.
@Suite("courier deliver on a metered connection", .serialized, .enabled(if: NginxServer.isAvailable, "nginx is not installed"))
struct MeteredDeliverCLITests {
    /// The shop, a private bus with NetworkManager saying `metered`, and a configuration.
    struct Setup {
        let shop: Shop
        let bus: PrivateBus
        let config: URL

        init(metered: UInt32, configuration: String = #"{"queue": {"heartbeatInterval": 0.5, "leaseDuration": 4}}"#) throws {
            shop = try Shop()
            bus = try PrivateBus()
            try bus.startTemplate("networkmanager", owning: "org.freedesktop.NetworkManager", system: true)
            try bus.setMetered(metered)
            config = shop.directory.appending("metered.json")
            try Data(configuration.utf8).write(to: config)
        }

        var environment: [String: String] { ["COURIER_CONFIG": config.path, "DBUS_SYSTEM_BUS_ADDRESS": bus.address] }

        func deliver(_ extra: [String] = [], product: String = Shop.products[0]) throws -> CourierBinary.Result {
            let receipt = try shop.receipt([product], name: "receipt-\(product).txt")
            return try CourierBinary.run(
                shop.deliverArguments(receipt) + extra + ["--storage", shop.storage.path], environment: environment,
                directory: shop.directory.url)
        }

        /// Package requests nginx served (the catalog's do not count).
        var packageRequests: Int { shop.nginx.accessLog().filter { $0.contains(".zip") }.count }

        func stop() {
            bus.stop()
            shop.stop()
        }
    }

    @Test("without a terminal: nothing is downloaded, exit 7 with the way on, the purchase stays queued")
    func withoutTerminal() throws {
        let setup = try Setup(metered: 1)
        defer { setup.stop() }
        let run = try setup.deliver()
        #expect(run.status == 7, "\(run.stderr)")
        #expect(run.stderr.contains("courier: the connection is metered (NetworkManager); nothing was downloaded"), "\(run.stderr)")
        #expect(run.stderr.contains("--allow-metered"), "\(run.stderr)")
        #expect(setup.packageRequests == 0)
        #expect(!setup.shop.isPlaced(Shop.products[0]))
        // --json: the same refusal as an error event, no question.
        let json = try setup.deliver(["--json"])
        #expect(json.status == 7)
        #expect(json.events.last?["code"] as? String == "paused", "\(json.stdout)")
        #expect(setup.packageRequests == 0)

        // --allow-metered answers in advance.
        let allowed = try setup.deliver(["--allow-metered"])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(setup.shop.isPlaced(Shop.products[0]))
    }

    @Test("transfer.allowMetered answers in advance; guess-no and no NetworkManager do not ask")
    func configuredOrNotMetered() throws {
        let configured = try Setup(metered: 3, configuration: #"{"transfer": {"allowMetered": true}}"#)
        defer { configured.stop() }
        let run = try configured.deliver()
        #expect(run.status == 0, "\(run.stderr)")
        #expect(configured.shop.isPlaced(Shop.products[0]))

        let guessNo = try Setup(metered: 4)
        defer { guessNo.stop() }
        let second = try guessNo.deliver()
        #expect(second.status == 0, "\(second.stderr)")
        #expect(guessNo.shop.isPlaced(Shop.products[0]))

        guessNo.bus.stopTemplates()  // the bus stays, NetworkManager is gone: not metered
        let third = try guessNo.deliver(product: Shop.products[2])
        #expect(third.status == 0, "\(third.stderr)")
        #expect(guessNo.shop.isPlaced(Shop.products[2]))
    }

    @Test("on a terminal it asks once with the size: n downloads nothing (exit 7), y delivers")
    func asksOnTerminal() throws {
        let setup = try Setup(metered: 1)
        defer { setup.stop() }
        for answer in ["n", "y"] {
            let terminal = try PseudoTerminal(columns: 100)
            let process = Process()
            process.executableURL = CourierBinary.url
            process.arguments = setup.shop.deliverArguments(try setup.shop.receipt([Shop.products[0]])) + ["--storage", setup.shop.storage.path]
            process.environment = ProcessInfo.processInfo.environment.merging(setup.environment) { $1 }
            process.currentDirectoryURL = setup.shop.directory.url
            process.standardInput = terminal.secondary
            process.standardOutput = FileHandle.nullDevice
            process.standardError = terminal.secondary
            try process.run()
            terminal.closeSecondary()
            let asked = waitUntilTrue(60) { terminal.textSoFar().contains("[y/N]") }
            #expect(asked, "\(terminal.textSoFar())")
            terminal.type(answer + "\n")
            process.waitUntilExit()
            let text = terminal.output().map(\.text).joined()
            #expect(text.components(separatedBy: "The connection is metered. Download 1 MB anyway? [y/N]").count == 2, "\(text)")
            if answer == "n" {
                #expect(process.terminationStatus == 7, "\(text)")
                #expect(setup.packageRequests == 0)
            } else {
                #expect(process.terminationStatus == 0, "\(text)")
                #expect(setup.shop.isPlaced(Shop.products[0]))
            }
        }
    }

    private func waitUntilTrue(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(50_000)
        }
        return condition()
    }
}
