import ArgumentParser
import Courier
import CourierServer
import Foundation

/// `courier origin`: the origin's deployment helpers (`courier serve` is the origin itself).
struct OriginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "origin",
        abstract: "Deploy the origin behind nginx: print the configuration for nginx and the gates.",
        subcommands: [OriginNginxConfigCommand.self]
    )
}

/// `courier origin nginx-config`: prints the nginx configuration that serves a content folder
/// with nginx and asks `courier serve` gates at `/authorize` (docs/origin.md, "Behind nginx").
struct OriginNginxConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nginx-config",
        abstract: "Print an nginx configuration that serves DIR and asks courier serve gates first.",
        discussion: """
            Prints an upstream and a server block to include in nginx's http { } block: nginx \
            serves the staged packages with sendfile and byte ranges, and for each request but \
            /catalog.json asks a gate (`courier serve` with the receipt gate) at /authorize \
            (auth_request), balancing over the gates and moving to the next on a connection error \
            or timeout; 401 and 403 reach the client as the gate said them. nginx reuses a gate's \
            allow for the same token and path for --decision-cache seconds (default 2; 0 turns \
            the cache off), so a refund takes up to that long (plus a second) to reach nginx; an \
            allow never outlives the token's own expiry, and refusals are not reused. A signed \
            transaction (Bearer HEADER.PAYLOAD.SIGNATURE) is keyed by its payload and signature, \
            any other Authorization value by the whole value.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Option(name: .long, help: "The folder `courier prestage` published (nginx's root).")
    var content: String

    @Option(name: .long, help: "A gate's address, HOST:PORT (repeat for each `courier serve` gate).")
    var gate: [String] = []

    @Option(name: .long, help: "The address nginx listens on, HOST:PORT or PORT.")
    var listen: String = "127.0.0.1:8080"

    @Option(name: .long, help: "Idle keepalive connections to the gates, per nginx worker.")
    var keepalive: Int = 32

    @Option(
        name: .customLong("decision-cache"),
        help: "Seconds nginx reuses a gate's allow for the same token and path (0: ask the gate for every request)."
    )
    var decisionCache: Int = NginxGateConfiguration.defaultDecisionCache

    @Option(name: .customLong("decision-cache-path"), help: "The folder nginx keeps cached decisions in (made owner-only by nginx).")
    var decisionCachePath: String = NginxGateConfiguration.defaultDecisionCachePath

    func run() async throws {
        try await global.run { output in
            let folder = URL(fileURLWithPath: content, isDirectory: true).standardizedFileURL
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: folder.path, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw CourierError(.usage, "\(folder.path) is not a folder", hint: "run `courier prestage --dest DIR` first")
            }
            let configuration = try NginxGateConfiguration(
                contentDirectory: folder.path, gates: gate, listen: listen, keepalive: keepalive,
                decisionCache: decisionCache, decisionCachePath: decisionCachePath
            )
            if global.json {
                output.emit(
                    NginxConfigResult(
                        content: folder.path, gates: gate, listen: listen, decisionCache: decisionCache,
                        configuration: configuration.render()))
            } else {
                var text = configuration.render()
                if text.hasSuffix("\n") { text.removeLast() }
                output.line(text)
            }
        }
    }
}
