import ArgumentParser
import Courier
import Foundation

/// Options every subcommand accepts (DESIGN.md, "Command-line contract").
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: "The data root (default ./Storage, or COURIER_STORAGE).")
    var storage: String?

    @Option(name: .long, help: "The configuration file (default ./Config/courier.json, or COURIER_CONFIG).")
    var config: String?

    @Flag(name: .long, help: "Machine-readable output: one JSON document, or NDJSON events.")
    var json = false

    /// The storage layout these options name. An existing root that others may enter is made
    /// owner-only (it holds signed transactions), with a one-line note on standard error.
    var layout: StorageLayout {
        let layout = StorageLayout.resolve(explicit: storage)
        if let previous = try? layout.secureRoot() {
            let note = "courier: made \(layout.root.path) owner-only (mode 0700, was \(String(previous, radix: 8))): "
                + "it holds signed purchases\n"
            FileHandle.standardError.write(Data(note.utf8))
        }
        return layout
    }

    /// The configuration: the file (required when named with --config), then the environment.
    func loadConfiguration() throws -> CourierConfiguration {
        if let config {
            return try CourierConfiguration.load(file: URL(fileURLWithPath: config), required: true)
        }
        let environment = ProcessInfo.processInfo.environment
        let file = CourierConfiguration.defaultFile(environment: environment)
        return try CourierConfiguration.load(file: file, required: environment["COURIER_CONFIG"] != nil)
    }
}
