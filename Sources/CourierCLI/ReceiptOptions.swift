import ArgumentParser
import Courier
import Foundation

/// The receipt options of every command that validates receipts (`receipt verify`, `deliver`,
/// `enqueue`, `agent`, `serve`). They override `Config/courier.json`'s `receipts` section.
struct ReceiptOptions: ParsableArguments {
    @Option(
        name: .customLong("trust-root"),
        help: ArgumentHelp(
            "A trusted root certificate, DER or PEM (repeatable); replaces receipts.trustRoots.",
            valueName: "path"
        )
    )
    var trustRoots: [String] = []

    @Option(name: .customLong("bundle-id"), help: ArgumentHelp("The app's bundle identifier.", valueName: "id"))
    var bundleId: String?

    @Option(
        name: .customLong("environment"),
        help: ArgumentHelp(
            "An accepted App Store environment, Production or Sandbox (repeatable; default Production only).",
            valueName: "name"
        )
    )
    var environments: [String] = []

    func validate() throws {
        for environment in environments where Self.canonicalEnvironment(environment) == nil {
            throw ValidationError("--environment must be Production or Sandbox, not \(environment)")
        }
    }

    /// The App Store's spelling of an environment name given in any case.
    static func canonicalEnvironment(_ name: String) -> String? {
        ["Production", "Sandbox", "Xcode", "LocalTesting"].first { $0.lowercased() == name.lowercased() }
    }

    /// Applies these options over `configuration.receipts`. `--trust-root` paths are taken
    /// relative to the current directory and replace the configured roots.
    func apply(to configuration: inout CourierConfiguration) {
        if !trustRoots.isEmpty {
            configuration.receipts.trustRoots = trustRoots.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        }
        if let bundleId { configuration.receipts.bundleId = bundleId }
        if !environments.isEmpty {
            configuration.receipts.environments = Set(environments.map { Self.canonicalEnvironment($0) ?? $0 })
        }
    }
}
