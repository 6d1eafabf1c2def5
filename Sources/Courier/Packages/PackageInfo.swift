import Foundation

/// What a hosted content package is: the product and version its `ContentInfo.plist` names, its
/// entry count, sizes and the SHA-256 of the package file.
public struct PackageInfo: Sendable, Codable, Equatable {
    /// `IAPProductIdentifier` of ContentInfo.plist.
    public var productId: String
    /// `ContentVersion` of ContentInfo.plist.
    public var version: String
    /// Files, folders and links in the package.
    public var entryCount: Int
    /// The size of the package file in bytes.
    public var packedSize: Int64
    /// The total size of its entries once unpacked, in bytes.
    public var unpackedSize: Int64
    /// Lowercase hex SHA-256 of the package file.
    public var sha256: String

    public init(productId: String, version: String, entryCount: Int, packedSize: Int64, unpackedSize: Int64, sha256: String) {
        self.productId = productId
        self.version = version
        self.entryCount = entryCount
        self.packedSize = packedSize
        self.unpackedSize = unpackedSize
        self.sha256 = sha256
    }
}

/// The two keys of a package's `ContentInfo.plist`.
package struct ContentInfo: Sendable, Equatable {
    static let fileName = "ContentInfo.plist"
    package var productId: String
    package var version: String

    /// Parses an XML (or binary) property list holding `IAPProductIdentifier` and `ContentVersion`.
    /// A pure function of the bytes (the fuzz target of the ContentInfo.plist reader): anything
    /// else is `hostilePackage`.
    package static func parse(_ data: Data) throws -> ContentInfo {
        let object: Any
        do {
            object = try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
        } catch {
            throw EntryRules.hostile("ContentInfo.plist is not a valid property list")
        }
        guard let dictionary = object as? [String: Any] else {
            throw EntryRules.hostile("ContentInfo.plist is not a dictionary")
        }
        guard let productId = dictionary["IAPProductIdentifier"] as? String, !productId.isEmpty else {
            throw EntryRules.hostile("ContentInfo.plist lacks a string IAPProductIdentifier")
        }
        guard let version = dictionary["ContentVersion"] as? String, !version.isEmpty else {
            throw EntryRules.hostile("ContentInfo.plist lacks a string ContentVersion")
        }
        return ContentInfo(productId: productId, version: version)
    }

    /// The XML property list for these keys, byte-for-byte stable (keys sorted).
    func xml() -> Data {
        func escape(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;")
        }
        let text = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
            \t<key>ContentVersion</key>
            \t<string>\(escape(version))</string>
            \t<key>IAPProductIdentifier</key>
            \t<string>\(escape(productId))</string>
            </dict>
            </plist>

            """
        return Data(text.utf8)
    }

    /// Checks the plist against the purchase's product and, when given, the catalog's version.
    func check(expectedProductId: String, expectedVersion: String?) throws {
        guard productId.isIdentical(to: expectedProductId) else {
            throw EntryRules.hostile(
                "ContentInfo.plist names the product \(productId.debugDescription), not \(expectedProductId.debugDescription)"
            )
        }
        if let expectedVersion, !version.isIdentical(to: expectedVersion) {
            throw EntryRules.hostile(
                "ContentInfo.plist carries version \(version.debugDescription), not \(expectedVersion.debugDescription)"
            )
        }
    }
}
