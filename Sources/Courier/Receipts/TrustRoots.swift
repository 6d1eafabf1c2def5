import Foundation
import X509

/// Loads the certificates trusted as roots of the App Store signing chain.
public enum TrustRoots {
    /// The certificates in `file`: DER, or PEM with one or more `CERTIFICATE` blocks.
    /// A missing or unreadable file is a configuration error (`usage`).
    public static func load(_ file: URL) throws -> [Certificate] {
        let data: Data
        do {
            data = try Data(contentsOf: file)
        } catch {
            throw CourierError(
                .usage,
                "cannot read the trusted root \(file.path)",
                cause: "\(error)",
                hint: "pass a DER or PEM certificate with --trust-root, or fix receipts.trustRoots"
            )
        }
        if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN") {
            let blocks = pemBlocks(text)
            let certificates = blocks.compactMap { try? Certificate(pemEncoded: $0) }
            guard !certificates.isEmpty, certificates.count == blocks.count else {
                throw CourierError(.usage, "\(file.path) holds no readable PEM certificate")
            }
            return certificates
        }
        do {
            return [try Certificate(derEncoded: Array(data))]
        } catch {
            throw CourierError(.usage, "\(file.path) is not a DER or PEM certificate", cause: "\(error)")
        }
    }

    /// The certificates of every file in `files`, in order.
    public static func load(_ files: [URL]) throws -> [Certificate] {
        try files.flatMap { try load($0) }
    }

    /// The `CERTIFICATE` blocks of a PEM text, each with its BEGIN and END lines.
    static func pemBlocks(_ text: String) -> [String] {
        var blocks: [String] = []
        var current: [Substring]?
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed == "-----BEGIN CERTIFICATE-----" {
                current = [Substring(trimmed)]
            } else if trimmed == "-----END CERTIFICATE-----", var lines = current {
                lines.append(Substring(trimmed))
                blocks.append(lines.joined(separator: "\n"))
                current = nil
            } else if current != nil {
                current?.append(Substring(trimmed))
            }
        }
        return blocks
    }
}
